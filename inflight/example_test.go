package inflight_test

import (
	"context"
	"fmt"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/policy"
)

// A limit of two jobs at once per client: the third is refused until one
// of the first two is released, and a slot never released comes back when
// its lease ends.
func ExampleLimiter() {
	now := time.Unix(1_700_000_000, 0)
	store := inflight.NewMemory(inflight.MemoryConfig{})
	l, _ := inflight.New(inflight.Config{
		Policy: &policy.Policy{Name: "speech", Limit: 2, Window: 15 * time.Minute},
		Store:  store,
		Now:    func() time.Time { return now },
	})
	ctx := context.Background()
	req := edgelimit.Request{Key: "hashed-client-key"}

	a, _ := l.Allow(ctx, req)
	b, _ := l.Allow(ctx, req)
	c, _ := l.Allow(ctx, req)
	fmt.Println(a.Allowed, a.Remaining, b.Allowed, b.Remaining, c.Allowed, c.RetryAfter)

	_ = l.Finish(ctx, req, a, 200, 0) // a's handler returned
	d, _ := l.Allow(ctx, req)
	fmt.Println(d.Allowed)

	// b and d are never released (their instance died): both slots come
	// back when their leases end.
	now = now.Add(15 * time.Minute)
	e, _ := l.Allow(ctx, req)
	fmt.Println(e.Allowed, e.Remaining)
	// Output:
	// true 1 true 0 false 1s
	// true
	// true 1
}

// At most 8 GPU-seconds running per client: a request holds as many slots
// as its job's seconds (its cost), taken all at once and given back all at
// once.
func ExampleLimiter_cost() {
	now := time.Unix(1_700_000_000, 0)
	l, _ := inflight.New(inflight.Config{
		Policy: &policy.Policy{Name: "gpu-seconds", Limit: 8, Window: 15 * time.Minute},
		Store:  inflight.NewMemory(inflight.MemoryConfig{}),
		Now:    func() time.Time { return now },
	})
	ctx := context.Background()
	job := func(seconds int64) edgelimit.Request {
		return edgelimit.Request{Key: "hashed-client-key", Cost: seconds}
	}

	a, _ := l.Allow(ctx, job(3))
	b, _ := l.Allow(ctx, job(4))
	c, _ := l.Allow(ctx, job(2)) // 1 second free: none of the 2 is taken
	fmt.Println(a.Allowed, b.Allowed, b.Remaining, c.Allowed, c.Remaining)

	_ = l.Finish(ctx, job(3), a, 200, 0) // all 3 come back
	d, _ := l.Allow(ctx, job(4))
	fmt.Println(d.Allowed, d.Remaining)

	e, _ := l.Allow(ctx, job(9)) // more than the limit: never fits
	fmt.Println(e.Allowed, e.RetryAfter)
	// Output:
	// true true 1 false 1
	// true 0
	// false 15m0s
}
