package inflight_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestParse(t *testing.T) {
	head := "version: 1\npolicies:\n  - {name: speech, routes: [\"POST /tts\"], key: header:X-Api-Key, strategy: inflight, "
	for _, tc := range []struct {
		name, fields string
		want         string // a phrase of the error, "" for none
		check        func(*testing.T, *policy.Policy)
	}{
		{"defaults", "limit: 2, window: 15m", "", func(t *testing.T, p *policy.Policy) {
			if p.OnStoreError != policy.FailClosed {
				t.Errorf("on_store_error = %s, want deny", p.OnStoreError)
			}
			if o := p.Options.(*inflight.Options); o.RetryAfter != 0 {
				t.Errorf("options = %+v", o)
			}
		}},
		{"retry_after", "limit: 2, window: 15m, retry_after: 5s", "", func(t *testing.T, p *policy.Policy) {
			if o := p.Options.(*inflight.Options); o.RetryAfter != 5*time.Second {
				t.Errorf("retry_after = %s", o.RetryAfter)
			}
		}},
		{"fail open", "limit: 2, window: 15m, on_store_error: allow", "", func(t *testing.T, p *policy.Policy) {
			if p.OnStoreError != policy.FailOpen {
				t.Errorf("on_store_error = %s", p.OnStoreError)
			}
		}},
		{"tiers", "limit: 2, window: 15m, tiers: {by: \"header:X-Plan\", default: free, levels: {free: {limit: 1}, pro: {limit: 5, window: 30m}}}", "", nil},
		{"cost", "limit: 8, window: 15m, cost: 3", "", func(t *testing.T, p *policy.Policy) {
			if p.Cost != 3 {
				t.Errorf("cost = %d, want 3 (slots each request holds)", p.Cost)
			}
		}},
		{"cost at the limit", "limit: 2, window: 15m, cost: 2", "", nil},
		{"cost above the limit", "limit: 2, window: 15m, cost: 3", "cost 3 is more than the limit 2", nil},
		{"cost above a tier's limit", "limit: 4, window: 15m, cost: 3, tiers: {by: \"header:X-Plan\", default: free, levels: {free: {limit: 2}, pro: {}}}", "tier \"free\": limit 2 is less than the cost 3", nil},
		{"reserve", "limit: 2, window: 15m, reserve: 2", "reserve needs charge: response", nil},
		{"short lease", "limit: 2, window: 500ms", "no shorter than the function's timeout", nil},
		{"sub-millisecond lease", "limit: 2, window: 1500100us", "whole number of milliseconds", nil},
		{"huge limit", "limit: 10001, window: 15m", "more than 10000", nil},
		{"local", "limit: 2, window: 15m, on_store_error: local", "would never be released", nil},
		{"charge", "limit: 2, window: 15m, charge: response", "charge applies to quotas", nil},
		{"charge_status", "limit: 2, window: 15m, charge_status: [401]", "charge_status applies to quotas", nil},
		{"refund_status", "limit: 2, window: 15m, refund_status: [500]", "released after every response", nil},
		{"retry_after zero", "limit: 2, window: 15m, retry_after: 0s", "must be positive", nil},
		{"retry_after beyond the lease", "limit: 2, window: 15m, retry_after: 1h", "longer than the lease", nil},
		{"a durable field", "limit: 2, window: 15m, algorithm: gcra", "algorithm", nil},
		{"tier burst", "limit: 2, window: 15m, tiers: {by: \"header:X-Plan\", default: free, levels: {free: {burst: 3}}}", "burst means nothing", nil},
		{"tier short lease", "limit: 2, window: 15m, tiers: {by: \"header:X-Plan\", default: free, levels: {free: {window: 10ms}}}", "is a lease", nil},
		{"tier huge limit", "limit: 2, window: 15m, tiers: {by: \"header:X-Plan\", default: free, levels: {free: {limit: 20000}}}", "more than 10000", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := policy.Parse("p.yaml", []byte(head+tc.fields+"}\n"))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("policy.Parse: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("policy.Parse = %v, want an error with %q", err, tc.want)
			case tc.want != "":
				if !strings.Contains(err.Error(), "p.yaml:3") {
					t.Errorf("error %q does not name the line", err)
				}
				return
			}
			if tc.check != nil {
				tc.check(t, f.Policies[0])
			}
			if _, err := inflight.New(inflight.Config{Policy: f.Policies[0]}); err != nil {
				t.Errorf("New of a parsed policy: %v", err)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	ok := func() *policy.Policy {
		return &policy.Policy{Name: "p", Strategy: inflight.Strategy, Limit: 2, Window: time.Minute, Cost: 1}
	}
	for _, tc := range []struct {
		name string
		pol  func() *policy.Policy
		opts *inflight.Options
		want error
	}{
		{"valid", ok, nil, nil},
		{"no strategy, no cost", func() *policy.Policy { return &policy.Policy{Name: "p", Limit: 1, Window: time.Second} }, nil, nil},
		{"no policy", func() *policy.Policy { return nil }, nil, inflight.ErrConfig},
		{"no name", func() *policy.Policy { p := ok(); p.Name = ""; return p }, nil, inflight.ErrConfig},
		{"# in name", func() *policy.Policy { p := ok(); p.Name = "a#b"; return p }, nil, inflight.ErrConfig},
		{"another strategy", func() *policy.Policy { p := ok(); p.Strategy = &policy.Strategy{Name: "kv"}; return p }, nil, inflight.ErrConfig},
		{"foreign options", func() *policy.Policy { p := ok(); p.Options = struct{}{}; return p }, nil, inflight.ErrConfig},
		{"negative limit", func() *policy.Policy { p := ok(); p.Limit = -1; return p }, nil, inflight.ErrConfig},
		{"huge limit", func() *policy.Policy { p := ok(); p.Limit = inflight.MaxLimit + 1; return p }, nil, inflight.ErrConfig},
		{"no lease", func() *policy.Policy { p := ok(); p.Window = 0; return p }, nil, inflight.ErrConfig},
		{"sub-millisecond lease", func() *policy.Policy { p := ok(); p.Window = 1500 * time.Microsecond; return p }, nil, inflight.ErrConfig},
		{"cost 2 of 2", func() *policy.Policy { p := ok(); p.Cost = 2; return p }, nil, nil},
		{"cost 3 of 2", func() *policy.Policy { p := ok(); p.Cost = 3; return p }, nil, inflight.ErrCost},
		{"cost 3 of limit 0", func() *policy.Policy { p := ok(); p.Limit = 0; p.Cost = 3; return p }, nil, nil},
		{"retry hint beyond the lease", ok, &inflight.Options{RetryAfter: time.Hour}, inflight.ErrConfig},
		{"negative retry hint", ok, &inflight.Options{RetryAfter: -time.Second}, inflight.ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := inflight.New(inflight.Config{Policy: tc.pol(), Options: tc.opts})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (l != nil) {
				t.Errorf("New = %v, %v; want error %v", l, err, tc.want)
			}
		})
	}
}

func newLimiter(t *testing.T, limit int64, lease time.Duration, store inflight.Store, now func() time.Time) *inflight.Limiter {
	t.Helper()
	l, err := inflight.New(inflight.Config{
		Policy: &policy.Policy{Name: "speech", Strategy: inflight.Strategy, Limit: limit, Window: lease, Cost: 1},
		Store:  store, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRequestErrors(t *testing.T) {
	l := newLimiter(t, 2, time.Minute, inflight.NewMemory(inflight.MemoryConfig{}), limitertest.NewClock(t0).Now)
	ctx := context.Background()
	if _, err := l.Allow(ctx, edgelimit.Request{}); !errors.Is(err, inflight.ErrNoKey) {
		t.Errorf("Allow without a key: %v, want ErrNoKey", err)
	}
	if _, err := l.Peek(ctx, edgelimit.Request{}); !errors.Is(err, inflight.ErrNoKey) {
		t.Errorf("Peek without a key: %v, want ErrNoKey", err)
	}
	d, err := l.Allow(ctx, edgelimit.Request{Key: "k"})
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	if err := l.Finish(ctx, edgelimit.Request{}, d, 0, 0); !errors.Is(err, inflight.ErrNoKey) {
		t.Errorf("Finish without the key: %v, want ErrNoKey", err)
	}
	if q, w := l.Quota(); q != 2 || w != time.Minute {
		t.Errorf("Quota = %d, %s; want 2, 1m", q, w)
	}
}

// TestReleaseIgnoresCancellation: a release whose context was cancelled
// (the client went away, the engine's budget context of a cancelled
// request) still lands; one whose deadline passed does not.
func TestReleaseIgnoresCancellation(t *testing.T) {
	l := newLimiter(t, 1, time.Minute, inflight.NewMemory(inflight.MemoryConfig{}), limitertest.NewClock(t0).Now)
	r := edgelimit.Request{Key: "k"}
	d, err := l.Allow(context.Background(), r)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Finish(ctx, r, d, 499, 0); err != nil {
		t.Fatalf("Finish with a cancelled context: %v", err)
	}
	d, err = l.Allow(context.Background(), r)
	if err != nil || !d.Allowed {
		t.Fatalf("after the release: %+v, %v; want allowed", d, err)
	}
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := l.Refund(past, r, d); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Refund past its deadline: %v, want DeadlineExceeded", err)
	}
}

// TestAbandonedLimiter: a limiter that took a slot and was dropped without
// releasing it (its instance died) holds the slot until the lease ends; a
// new limiter on the store gets it back at that instant, not before.
func TestAbandonedLimiter(t *testing.T) {
	const lease = 15 * time.Minute
	store := inflight.NewMemory(inflight.MemoryConfig{})
	func() {
		dead := newLimiter(t, 2, lease, store, func() time.Time { return t0 })
		for range 2 {
			if d, err := dead.Allow(context.Background(), edgelimit.Request{Key: "k"}); err != nil || !d.Allowed {
				t.Fatal(d, err)
			}
		}
	}()
	clock := limitertest.NewClock(t0.Add(lease - time.Nanosecond))
	l := newLimiter(t, 2, lease, store, clock.Now)
	if d, _ := l.Allow(context.Background(), edgelimit.Request{Key: "k"}); d.Allowed {
		t.Fatalf("1ns before the abandoned leases end: %+v, want denied", d)
	}
	clock.Set(t0.Add(lease))
	for i := range 2 {
		if d, _ := l.Allow(context.Background(), edgelimit.Request{Key: "k"}); !d.Allowed {
			t.Fatalf("take %d as the abandoned leases end: %+v, want allowed", i+1, d)
		}
	}
}

func TestMemoryFull(t *testing.T) {
	store := inflight.NewMemory(inflight.MemoryConfig{Shards: 1, MaxKeys: 2})
	clock := limitertest.NewClock(t0)
	l := newLimiter(t, 1, time.Minute, store, clock.Now)
	ctx := context.Background()
	a, _ := l.Allow(ctx, edgelimit.Request{Key: "a"})
	if _, err := l.Allow(ctx, edgelimit.Request{Key: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, edgelimit.Request{Key: "c"}); !errors.Is(err, inflight.ErrStoreFull) {
		t.Fatalf("a third key with two live: %v, want ErrStoreFull", err)
	}
	if err := l.Finish(ctx, edgelimit.Request{Key: "a"}, a, 0, 0); err != nil {
		t.Fatal(err)
	}
	if d, err := l.Allow(ctx, edgelimit.Request{Key: "c"}); err != nil || !d.Allowed {
		t.Fatalf("after a's release: %+v, %v", d, err)
	}
	// b's lease ends unreleased: the sweep makes room for a new key.
	clock.Advance(time.Minute)
	if d, err := l.Allow(ctx, edgelimit.Request{Key: "d"}); err != nil || !d.Allowed {
		t.Fatalf("after b's and c's leases ended: %+v, %v", d, err)
	}
}

// TestMemoryDefaults: a MemoryConfig's zero or negative sizes are its
// defaults, as in every strategy's NewMemory (NewMemoryStore refused
// negative ones).
func TestMemoryDefaults(t *testing.T) {
	for _, cfg := range []inflight.MemoryConfig{{}, {Shards: -1, MaxKeys: -1}} {
		l := newLimiter(t, 1, time.Minute, inflight.NewMemory(cfg), limitertest.NewClock(t0).Now)
		for i, want := range []bool{true, false} {
			if d, err := l.Allow(context.Background(), edgelimit.Request{Key: "k"}); err != nil || d.Allowed != want {
				t.Errorf("%+v: take %d = %+v, %v; want allowed %v", cfg, i+1, d, err, want)
			}
		}
	}
}
