package durablecounter

import (
	"context"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// hookStore is a Store that runs a function of the test right after one
// call of its inner store returned and before the Counter sees the answer:
// the moment another goroutine of the same instance can overtake it.
type hookStore struct {
	Store
	afterGet, afterApply func()
}

func (h *hookStore) get(ctx context.Context, o op) (state, error) {
	st, err := h.Store.get(ctx, o)
	if f := h.afterGet; f != nil {
		h.afterGet = nil
		f()
	}
	return st, err
}

func (h *hookStore) apply(ctx context.Context, o op) (result, error) {
	r, err := h.Store.apply(ctx, o)
	if f := h.afterApply; f != nil {
		h.afterApply = nil
		f()
	}
	return r, err
}

func hookedCounter(t *testing.T, alg Algorithm, limit int64) (*Counter, *hookStore) {
	t.Helper()
	clock := limitertest.NewClock(limitertest.T0)
	h := &hookStore{Store: NewMemory(MemoryConfig{})}
	c, err := New(Config{Policy: &policy.Policy{Name: "fresh", Limit: limit, Window: time.Hour},
		Options: &Options{Algorithm: alg, DenyCache: true}, Store: h, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return c, h
}

// TestPeekShowsAnAdmissionDuringItsRead pins the stale peek of
// powgate's TestConcurrentProofs (key B: remaining 33–38 after 8
// admissions, want 32, about 1 run in 12): a peek read the item, an
// admission of the same instance landed before the peek remembered its
// read, and the peek cache then answered "remaining" from before the
// admission for PeekFreshness. (The admission's unpeek ran before the
// peek's put, and found nothing to forget.) A peek must show every
// spending of its own instance that landed before it began.
func TestPeekShowsAnAdmissionDuringItsRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			c, h := hookedCounter(t, alg, 10)
			req := edgelimit.Request{Key: "k"}
			h.afterGet = func() {
				if d, err := c.Allow(ctx, req); err != nil || !d.Allowed {
					t.Fatalf("Allow during the peek's read = %+v, %v; want allowed", d, err)
				}
			}
			if d, err := c.Peek(ctx, req); err != nil || d.Remaining != 10 {
				t.Fatalf("Peek = %+v, %v; want 10 left (it read before the admission)", d, err)
			}
			d, err := c.Peek(ctx, req)
			if err != nil || !d.Allowed || d.Remaining != 9 {
				t.Errorf("Peek after the admission = %+v, %v; want allowed, 9 left", d, err)
			}
		})
	}
}

// TestDenialShowsARefundDuringItsCall: the deny cache's twin of the stale
// peek. A denial's state came back from the store, this instance's refund
// of an earlier admission landed, and only then was the denial remembered:
// the cache denied, for DenyCacheMaxAge, what the store admits. A state
// read before this instance's refund is not a lower bound after it.
func TestDenialShowsARefundDuringItsCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			c, h := hookedCounter(t, alg, 2)
			one, two := edgelimit.Request{Key: "k", Cost: 1}, edgelimit.Request{Key: "k", Cost: 2}
			first, err := c.Allow(ctx, one)
			if err != nil || !first.Allowed || first.Remaining != 1 {
				t.Fatalf("Allow(1) = %+v, %v; want allowed, 1 left", first, err)
			}
			h.afterApply = func() {
				if err := c.Refund(ctx, one, first); err != nil {
					t.Fatalf("Refund during the denial: %v", err)
				}
			}
			if d, err := c.Allow(ctx, two); err != nil || d.Allowed {
				t.Fatalf("Allow(2) = %+v, %v; want denied (decided before the refund)", d, err)
			}
			if d, err := c.Peek(ctx, two); err != nil || !d.Allowed {
				t.Errorf("Peek(2) after the refund = %+v, %v; want allowed", d, err)
			}
			if d, err := c.Allow(ctx, two); err != nil || !d.Allowed {
				t.Errorf("Allow(2) after the refund = %+v, %v; want allowed", d, err)
			}
		})
	}
}
