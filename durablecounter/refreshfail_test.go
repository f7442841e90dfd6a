package durablecounter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/internal/faultproxy"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// TestRefreshFailureIsShared: when a denied key's deny-cache entry expires
// while the store hangs, one request asks the store and the others wait
// for it (TestDenyCacheExpiryAsksOnce); when that call fails, they share
// its failure, marked edgelimit.ErrWaited so that the engine's breaker
// counts the one call, not one failure per waiting request (in the
// store-failure bench, five such waits in a row opened the breaker again
// within 200 ms of the store coming back). Each request's error is the
// store's (context.DeadlineExceeded), so on_store_error still decides it.
func TestRefreshFailureIsShared(t *testing.T) {
	t.Parallel()
	s := ddbtest.Servers(t)[0]
	_, table, _ := ddbtest.Table(t, s)
	proxy, err := faultproxy.New(s.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	client, _ := ddbtest.Client(t, ddbtest.Server{Name: s.Name, Endpoint: proxy.URL()})
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour).Add(time.Minute))
	c, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "hot", Limit: 10, Window: time.Second,
			Options: &durablecounter.Options{Algorithm: durablecounter.GCRA, Burst: 1, DenyCache: true}},
		Store: store, Now: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	req := edgelimit.Request{Key: "flood"}
	for range 3 { // one admitted, then denied: the denial is cached
		if _, err := c.Allow(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second) // past the denial: the entry has expired
	proxy.Set(faultproxy.Hang)
	before := proxy.Requests()
	const n = 32
	// Each request's budget is long enough for all of them to have joined
	// the first one's call on any machine, and the call hangs until then.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = c.Allow(ctx, req) })
	}
	wg.Wait()
	own := 0
	for i, err := range errs {
		switch {
		case err == nil:
			t.Errorf("request %d: no error from a hung store", i)
		case !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("request %d: %v, want the store call's context.DeadlineExceeded", i, err)
		case !errors.Is(err, edgelimit.ErrWaited):
			own++
		}
	}
	calls := proxy.Requests() - before
	if int64(own) != calls {
		t.Errorf("%d requests failed without ErrWaited, %d store calls reached the store: every other request should have waited for one", own, calls)
	}
	if calls != 1 {
		t.Errorf("%d of %d requests asked the hung store, want 1 (the others wait for it and share its failure)", calls, n)
	}
}
