package durablecounter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// The operator's Reset and Grant, on every store and algorithm (the
// helpers are in quota_test.go).

// Reset forgets a key's usage: every item of it (the policy's window, a
// tier's window of its own, the override's), on every shard, so the next
// request finds the whole quota; other keys keep theirs.
func TestReset(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			for _, shards := range []int{1, 2} {
				t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
					clock := limitertest.NewClock(quotaT0)
					p := quotaPolicy("reset-"+alg, alg, 4, time.Hour)
					p.Options.(*durablecounter.Options).Shards = shards
					p.Tiers = &policy.Tiers{Default: "free", Names: []string{"free", "half"},
						Levels: map[string]policy.Limits{"free": {Limit: 4}, "half": {Limit: 2, Window: 30 * time.Minute}}}
					q := newQuotaCounter(t, store(t), clock, p)
					half := p.Tiers.Levels["half"]
					override := policy.Limits{Window: 20 * time.Minute}
					for _, l := range []policy.Limits{{}, half, override} {
						q.spend("k", l, 4)
					}
					q.spend("other", policy.Limits{}, 4)
					clock.Advance(time.Millisecond)
					if err := q.c.Reset(context.Background(), edgelimit.Request{Key: "k", Limits: override}); err != nil {
						t.Fatal(err)
					}
					after := []struct {
						l    policy.Limits
						want int
					}{{policy.Limits{}, 4}, {half, 2}, {override, 4}}
					if alg == string(durablecounter.GCRA) {
						// One TAT whatever the limits: what the first spends,
						// the others see.
						after = after[:1]
					}
					for _, a := range after {
						if got := q.spend("k", a.l, 4); got != a.want {
							t.Errorf("after the reset, under %+v: %d admitted, want %d", a.l, got, a.want)
						}
					}
					if d := q.allow("other", policy.Limits{}); d.Allowed {
						t.Errorf("another key after the reset: %+v, want still denied", d)
					}
				})
			}
		})
	})
}

// Another instance's reset is honoured by this instance's deny cache
// within DenyCacheMaxAge: the cached denial answers until then, and the
// store after.
func TestResetOnAnotherInstance(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			clock := limitertest.NewClock(quotaT0)
			s := store(t)
			p := quotaPolicy("other-reset-"+alg, alg, 2, time.Hour)
			a, b := newQuotaCounter(t, s, clock, p), newQuotaCounter(t, s, clock, p)
			b.spend("k", policy.Limits{}, 2) // b's deny cache holds the denial
			if err := a.c.Reset(context.Background(), edgelimit.Request{Key: "k"}); err != nil {
				t.Fatal(err)
			}
			if _, inProcess := s.(*durablecounter.Memory); inProcess {
				// Counters of one Memory keep no deny cache: the reset
				// shows at once.
				if got := b.spend("k", policy.Limits{}, 2); got != 2 {
					t.Errorf("b right after a reset of its Memory: %d admitted, want the reset's 2", got)
				}
				return
			}
			clock.Advance(durablecounter.DefaultDenyCacheMaxAge - time.Millisecond)
			if d := b.allow("k", policy.Limits{}); d.Allowed {
				t.Errorf("b within DenyCacheMaxAge of its denial: %+v, want its cached denial", d)
			}
			clock.Advance(time.Millisecond)
			if got := b.spend("k", policy.Limits{}, 2); got != 2 {
				t.Errorf("b DenyCacheMaxAge after its denial: %d admitted, want the reset's 2", got)
			}
		})
	})
}

// A refund of a spending made before a reset gives nothing back to the
// count after it: the item's incarnation changed (gcra: its period).
func TestRefundAfterResetGivesNothing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			clock := limitertest.NewClock(quotaT0)
			q := newQuotaCounter(t, store(t), clock, quotaPolicy("rr-"+alg, alg, 3, time.Hour))
			ctx := context.Background()
			req := edgelimit.Request{Key: "k"}
			before := q.allow("k", policy.Limits{})
			if err := q.c.Reset(ctx, req); err != nil {
				t.Fatal(err)
			}
			if got := q.spend("k", policy.Limits{}, 3); got != 3 {
				t.Fatalf("after the reset: %d admitted, want 3", got)
			}
			if err := q.c.Refund(ctx, req, before); err != nil {
				t.Fatal(err)
			}
			if d := q.allow("k", policy.Limits{}); d.Allowed {
				t.Errorf("after refunding a spending from before the reset: %+v, want still denied (3 of 3 spent since)", d)
			}
		})
	})
}

// Grant gives a key units beyond its quota: spent once the quota is, for
// the current window or until an instant; a refund of a request the grant
// paid goes back to the grant; another instance sees a grant within
// DenyCacheMaxAge.
func TestGrant(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			ctx := context.Background()
			clock := limitertest.NewClock(quotaT0)
			s := store(t)
			p := quotaPolicy("grant-"+alg, alg, 2, time.Hour)
			q, other := newQuotaCounter(t, s, clock, p), newQuotaCounter(t, s, clock, p)
			req := edgelimit.Request{Key: "k"}
			q.spend("k", policy.Limits{}, 2)
			other.spend("k", policy.Limits{}, 0) // other's cache: denied, no grant
			if err := q.c.Grant(ctx, req, 3, time.Time{}); err != nil {
				t.Fatal(err)
			}
			d := q.allow("k", policy.Limits{})
			if !d.Allowed || d.Reason != "grant" || d.Remaining != 2 {
				t.Errorf("first request the grant pays: %+v, want allowed, Reason grant, Remaining 2", d)
			}
			if err := q.c.Refund(ctx, req, d); err != nil {
				t.Fatal(err)
			}
			if got := q.spend("k", policy.Limits{}, 3); got != 3 {
				t.Errorf("the grant of 3 (one refunded back): %d admitted, want 3", got)
			}
			// Peek sees the grant run dry, as Allow.
			if d, err := q.c.Peek(ctx, req); err != nil || d.Allowed {
				t.Errorf("Peek with the grant spent = %+v, %v; want a denial", d, err)
			}
			// Until an instant: it outlives the window.
			if err := q.c.Grant(ctx, req, 4, quotaT0.Add(3*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if d := other.allow("k", policy.Limits{}); d.Allowed {
				t.Errorf("another instance at once: %+v, want its cached denial (DenyCacheMaxAge)", d)
			}
			clock.Advance(durablecounter.DefaultDenyCacheMaxAge)
			if got := other.spend("k", policy.Limits{}, 4); got != 4 {
				t.Errorf("another instance DenyCacheMaxAge later: %d admitted, want the grant's 4", got)
			}
			if err := q.c.Grant(ctx, req, 5, quotaT0.Add(3*time.Hour)); err != nil {
				t.Fatal(err)
			}
			clock.Set(quotaT0.Add(2 * time.Hour))
			if got := q.spend("k", policy.Limits{}, 7); got != 7 {
				t.Errorf("two hours on: %d admitted, want the quota's 2 and the grant's 5", got)
			}
			if err := q.c.Grant(ctx, req, 1, quotaT0.Add(-time.Second)); !errors.Is(err, durablecounter.ErrGrant) {
				t.Errorf("a grant that has ended: %v, want ErrGrant", err)
			}
		})
	})
}

// A grant for the current window ends with it.
func TestGrantForTheWindowEnds(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			ctx := context.Background()
			clock := limitertest.NewClock(quotaT0)
			q := newQuotaCounter(t, store(t), clock, quotaPolicy("gw-"+alg, alg, 1, time.Hour))
			if err := q.c.Grant(ctx, edgelimit.Request{Key: "k"}, 10, time.Time{}); err != nil {
				t.Fatal(err)
			}
			// The window's end: the fixed (and sliding) window's, 30m on;
			// a window from now for the sliding log and gcra.
			end := quotaT0.Add(30 * time.Minute)
			if alg == string(durablecounter.SlidingLog) || alg == string(durablecounter.GCRA) {
				end = quotaT0.Add(time.Hour)
			}
			clock.Set(end.Add(-time.Millisecond))
			q.spend("k", policy.Limits{}, 11)
			clock.Set(end.Add(time.Hour)) // the quota is back, the grant has ended
			if got := q.spend("k", policy.Limits{}, 11); got != 1 {
				t.Errorf("after the grant's window: %d admitted, want the quota's 1", got)
			}
		})
	})
}

// Only a policy an operator manages (overrides: true) takes grants; the
// others pay nothing for them.
func TestGrantNeedsOverrides(t *testing.T) {
	p := quotaPolicy("plain", string(durablecounter.FixedWindow), 1, time.Hour)
	p.Overrides = false
	c, err := durablecounter.New(durablecounter.Config{Policy: p, Store: durablecounter.NewMemory(durablecounter.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Grant(context.Background(), edgelimit.Request{Key: "k"}, 1, time.Time{})
	if !errors.Is(err, durablecounter.ErrGrant) {
		t.Fatalf("Grant on a policy without overrides: %v, want ErrGrant", err)
	}
}

// A batch whose member's quota is spent is admitted when that member's
// grant pays, all or nothing still.
func TestGrantInABatch(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			ctx := context.Background()
			clock := limitertest.NewClock(quotaT0)
			s := store(t)
			a := newQuotaCounter(t, s, clock, quotaPolicy("ba-"+alg, alg, 1, time.Hour))
			b := newQuotaCounter(t, s, clock, quotaPolicy("bb-"+alg, alg, 10, time.Hour))
			batch := func() []edgelimit.Decision {
				ds, err := a.c.AllowBatch(ctx, []edgelimit.BatchItem{{Limiter: a.c, Request: edgelimit.Request{Key: "k"}}, {Limiter: b.c, Request: edgelimit.Request{Key: "k"}}})
				if err != nil {
					t.Fatal(err)
				}
				return ds
			}
			if ds := batch(); !ds[0].Allowed || !ds[1].Allowed {
				t.Fatalf("first batch: %+v", ds)
			}
			if ds := batch(); ds[0].Allowed {
				t.Fatalf("second batch, a spent: %+v, want a denied", ds)
			}
			if err := a.c.Grant(ctx, edgelimit.Request{Key: "k"}, 1, time.Time{}); err != nil {
				t.Fatal(err)
			}
			ds := batch()
			if !ds[0].Allowed || ds[0].Reason != "grant" || !ds[1].Allowed {
				t.Errorf("third batch, a's grant pays: %+v", ds)
			}
			if ds := batch(); ds[0].Allowed {
				t.Errorf("fourth batch, the grant spent: %+v, want a denied", ds)
			}
			if got := b.spend("k", policy.Limits{}, 10); got != 8 {
				t.Errorf("b after two admitted batches: %d left, want 8 (denied batches spend nothing)", got)
			}
		})
	})
}

// Issue #12.4 for grants and resets: 64 clients on one key while an
// operator grants and resets, at one instant (nothing frees by itself).
// What was admitted is never more than the limit once per reset (and
// once before them) plus what was granted, and with enough requests
// exactly that: no spurious denial.
func TestGrantAndResetUnderConcurrency(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			ctx := context.Background()
			clock := limitertest.NewClock(quotaT0)
			s := store(t)
			const limit = 10
			p := quotaPolicy("race-"+alg, alg, limit, time.Hour)
			a, other := newQuotaCounter(t, s, clock, p), newQuotaCounter(t, s, clock, p)
			ops := []func() error{
				func() error { return a.c.Grant(ctx, edgelimit.Request{Key: "k"}, 5, quotaT0.Add(time.Hour)) },
				func() error { return a.c.Reset(ctx, edgelimit.Request{Key: "k"}) },
				func() error { return a.c.Grant(ctx, edgelimit.Request{Key: "k"}, 3, quotaT0.Add(time.Hour)) },
			}
			var admitted atomic.Int64
			round := func(op func() error) {
				var wg sync.WaitGroup
				if op != nil {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := op(); err != nil {
							t.Error(err)
						}
					}()
				}
				for i := range 64 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						c := a.c
						if i%2 == 1 {
							c = other.c
						}
						d, err := c.Allow(ctx, edgelimit.Request{Key: "k"})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}()
				}
				wg.Wait()
			}
			for _, op := range ops {
				round(op)
			}
			// The instances' caches forget within DenyCacheMaxAge; then a
			// last round spends whatever is left.
			clock.Advance(durablecounter.DefaultDenyCacheMaxAge)
			round(nil)
			round(nil)
			// One reset: the limit twice, and the grants of 5 and 3.
			if got, want := admitted.Load(), int64(2*limit+5+3); got != want {
				t.Errorf("admitted %d, want exactly %d (the limit before and after the reset, and the grants)", got, want)
			}
		})
	})
}
