package durablecounter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// TestReadThenWriteContention puts the baseline and ours side by side under
// contention on dynalite, in one run: 64 goroutines send 500 requests for
// one hot key with a limit of 125. The baseline without retries admits a
// fraction of the limit (most requests lose the version race), with 10
// retries it needs several calls per decision and still denies requests
// that had room; ours admits exactly the limit with one call per decision
// and no spurious denial. (moto answers one call at a time: a contention
// test there measures nothing but its lock.) Ours runs with the deny cache
// (the default of a policy file) and, for the fixed window, without.
func TestReadThenWriteContention(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short")
	}
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		if s.Name == "moto" {
			t.Skip("moto serves one call at a time (see moto_serialized.py): no contention to measure")
		}
		t.Parallel()
		client, table, calls := ddbtest.Table(t, s)
		clock := limitertest.NewClock(limitertest.T0)
		const limit, requests = 125, 500
		type outcome struct {
			name                       string
			admitted, spurious, denied int64
			calls                      int64
		}
		run := func(name string, decide func(ctx context.Context) (bool, bool, error)) outcome {
			calls.Reset()
			var mu sync.Mutex
			o := outcome{name: name}
			err := hammer(requests, func(i int) error {
				ok, spurious, err := decide(context.Background())
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					return err
				case ok:
					o.admitted++
				case spurious:
					o.spurious++
				default:
					o.denied++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			o.calls = calls.Total()
			return o
		}
		var out []outcome
		for _, retries := range []int{0, 10} {
			b := &readThenWrite{client: client, table: table, limit: limit, window: time.Hour, retries: retries, now: clock.Now}
			key := fmt.Sprintf("hot-%d", retries)
			out = append(out, run(fmt.Sprintf("read-then-write, %d retries", retries), func(ctx context.Context) (bool, bool, error) {
				ok, err := b.allow(ctx, key)
				if errors.Is(err, errConflictsExhausted) {
					return false, true, nil // denied for losing races, not for the count
				}
				return ok, false, err
			}))
		}
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		type variant struct {
			alg       string
			denyCache bool
		}
		variants := []variant{{string(durablecounter.FixedWindow), false}}
		for _, alg := range allAlgorithms {
			variants = append(variants, variant{alg, true})
		}
		for _, v := range variants {
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &policy.Policy{Name: fmt.Sprintf("hot-%s-%v", v.alg, v.denyCache), Limit: limit, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(v.alg), DenyCache: v.denyCache}},
				Store:  store, Now: clock.Now,
			})
			if err != nil {
				t.Fatal(err)
			}
			name := "ours, " + v.alg
			if !v.denyCache {
				name += ", no deny cache"
			}
			o := run(name, func(ctx context.Context) (bool, bool, error) {
				d, err := c.Allow(ctx, edgelimit.Request{Key: "hot"})
				return d.Allowed, false, err
			})
			if o.admitted != limit {
				t.Errorf("%s: admitted %d of a limit of %d", o.name, o.admitted, limit)
			}
			out = append(out, o)
		}
		var tab strings.Builder
		fmt.Fprintf(&tab, "%-36s %9s %17s %8s %16s\n", "design (64 goroutines)", "admitted", "spurious denials", "denied", "calls/decision")
		for _, o := range out {
			fmt.Fprintf(&tab, "%-36s %9d %17d %8d %16.2f\n", o.name, o.admitted, o.spurious, o.denied, float64(o.calls)/requests)
			if o.admitted > limit {
				t.Errorf("%s admitted %d, above the limit of %d", o.name, o.admitted, limit)
			}
		}
		t.Logf("%d requests for one key, limit %d, on %s:\n%s", requests, limit, s.Name, tab.String())
	})
}

// hammer runs fn(i) for i in [0, n) on limitertest.Workers goroutines and
// returns the first error.
func hammer(n int, fn func(i int) error) error {
	var next atomic.Int64
	errs := make(chan error, limitertest.Workers)
	var wg sync.WaitGroup
	for range limitertest.Workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// Regression (the flood experiment, BENCHMARKS.md): when a deny-cache entry
// expired, every request of a flooding client in flight at that moment went
// to the store — 0.54 store calls per denied request for a gcra policy at
// 10/s, whose entry expires ten times a second. Now one request asks and the
// others wait for its answer. (The windowed algorithms start a new window
// with the whole limit free, so their first requests of a window must ask;
// gcra is the one whose denials expire while quota trickles back.)
func TestDenyCacheExpiryAsksOnce(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		client, table, calls := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		for _, alg := range []string{string(durablecounter.GCRA)} {
			clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour).Add(time.Minute))
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &policy.Policy{Name: alg + "-expiry", Limit: 10, Window: time.Second, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), Burst: 1, DenyCache: true}},
				Store:  store, Now: clock.Now,
			})
			if err != nil {
				t.Fatal(err)
			}
			req := edgelimit.Request{Key: "flood"}
			for range 20 { // spend the quota; the rest is cached as denied
				if _, err := c.Allow(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			// Past every denial's Retry-After: the entry has expired, and
			// exactly one unit fits again in every algorithm.
			clock.Advance(time.Second)
			calls.Reset()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, err := c.Allow(context.Background(), req)
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
			if got := calls.Total(); got > 2 {
				t.Errorf("%s on %s: 64 requests after the deny cache expired made %d store calls, want a few (one asks, the others wait)", alg, s.Name, got)
			}
			if got := admitted.Load(); got != 1 {
				t.Errorf("%s on %s: %d admitted after one unit refilled, want 1", alg, s.Name, got)
			}
		}
	})
}
