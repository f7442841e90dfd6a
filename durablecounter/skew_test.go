package durablecounter_test

import (
	"context"
	"fmt"
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

// TestClockSkewBurst (issue "When the store fails, fail fast", item 4):
// two instances on one store, one clock 2 s behind the other, a policy of
// 12 per 4 s, and 32 concurrent clients on a fresh key 300 ms into a window
// of the leading clock, half on each instance. What passes at once is
// bounded by the algorithm's real-time bound under skew s:
//
//   - sliding-window, sliding-log, gcra: limit + (s / window) * limit = 18
//     (gcra: limit + s / T);
//   - fixed-window: 2 * limit = 24. The lagging instance is still in the
//     previous window, a separate item that the leading one's writes never
//     touch, and each window's item takes the limit. (The issue measured 32
//     of 40 at 16 per 4 s, its documented bound being 24: no single write
//     can adopt a window the writer's clock has not reached, see the
//     package documentation, Clock skew.)
//
// On one clock the same burst is admitted exactly the limit: no spurious
// denial.
func TestClockSkewBurst(t *testing.T) {
	t.Parallel()
	const (
		limit   = 12
		window  = 4 * time.Second
		skew    = 2 * time.Second
		clients = 32
	)
	type backend struct {
		name string
		// pair returns two instances' stores on one fresh table (each
		// with views of its own), or one memory store twice.
		pair func(t *testing.T) [2]durablecounter.Store
	}
	backends := []backend{{"memory", func(*testing.T) [2]durablecounter.Store {
		m := durablecounter.NewMemory(durablecounter.MemoryConfig{})
		return [2]durablecounter.Store{m, m}
	}}}
	var servers []ddbtest.Server
	t.Run("servers", func(t *testing.T) { servers = ddbtest.Servers(t) }) // skips only itself
	for _, s := range servers {
		backends = append(backends, backend{s.Name, func(t *testing.T) (out [2]durablecounter.Store) {
			client, table, _ := ddbtest.Table(t, s)
			for i := range out {
				st, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
				if err != nil {
					t.Fatal(err)
				}
				out[i] = st
			}
			return out
		}})
	}
	lead := limitertest.WindowStart(limitertest.T0, window).Add(window + 300*time.Millisecond)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			stores := b.pair(t)
			for _, alg := range durablecounter.Algorithms {
				bound := int64(limit + skew*limit/window)
				if alg == durablecounter.FixedWindow {
					bound = 2 * limit
				}
				for _, c := range []struct {
					name string
					lag  time.Duration
					want func(n int64) bool
					what string
				}{
					{"skewed", skew, func(n int64) bool { return n >= limit && n <= bound }, fmt.Sprintf("%d to %d", limit, bound)},
					{"one clock", 0, func(n int64) bool { return n == limit }, fmt.Sprintf("exactly %d", limit)},
				} {
					t.Run(string(alg)+"/"+c.name, func(t *testing.T) {
						p := &policy.Policy{Name: "burst", Limit: limit, Window: window,
							Options: &durablecounter.Options{Algorithm: alg}}
						var counters [2]*durablecounter.Counter
						for i, at := range []time.Time{lead, lead.Add(-c.lag)} {
							cnt, err := durablecounter.New(durablecounter.Config{Policy: p, Store: stores[i], Now: func() time.Time { return at }})
							if err != nil {
								t.Fatal(err)
							}
							counters[i] = cnt
						}
						key := edgelimit.Request{Key: "k-" + string(alg) + "-" + c.name}
						var admitted atomic.Int64
						var start, done sync.WaitGroup
						start.Add(1)
						for i := range clients {
							done.Go(func() {
								start.Wait()
								d, err := counters[i%2].Allow(context.Background(), key)
								if err != nil {
									t.Error(err)
								}
								if d.Allowed {
									admitted.Add(1)
								}
							})
						}
						start.Done()
						done.Wait()
						n := admitted.Load()
						t.Logf("%d clients at once, clocks %s apart: %d admitted", clients, c.lag, n)
						if !c.want(n) {
							t.Errorf("%d admitted, want %s", n, c.what)
						}
					})
				}
			}
		})
	}
}
