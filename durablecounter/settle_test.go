package durablecounter_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// Settle's arithmetic at one fixed instant, on every algorithm and store:
// a reservation is spent as Allow spends it, and its settlement leaves the
// key counted its cost, exactly: less gives the difference back, more
// charges the excess (past the limit, once), zero gives it all back.
func TestSettleArithmetic(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			clock := limitertest.NewClock(quotaT0)
			p := quotaPolicy("settle-"+alg, alg, 20, time.Hour)
			q := newQuotaCounter(t, store(t), clock, p)
			ctx := context.Background()
			used := int64(0)
			for i, st := range []struct{ reserve, cost int64 }{
				{5, 2},  // 2
				{5, 5},  // 7: nothing to settle
				{3, 0},  // 7: all of it back
				{4, 9},  // 16: the excess charged
				{4, 1},  // 17: admitted with 4 left, back to 3
				{3, 10}, // 27: past the limit once
			} {
				req := edgelimit.Request{Key: "k", Cost: st.reserve}
				d, err := q.c.Allow(ctx, req)
				if err != nil || !d.Allowed {
					t.Fatalf("step %d: reserve %d with %d used: %+v, %v", i, st.reserve, used, d, err)
				}
				if _, err := q.c.Settle(ctx, req, d, st.cost); err != nil {
					t.Fatalf("step %d: Settle: %v", i, err)
				}
				used += st.cost
				peek, err := q.c.Peek(ctx, edgelimit.Request{Key: "k"})
				if err != nil {
					t.Fatal(err)
				}
				if want := max(0, 20-used); peek.Remaining != want {
					t.Errorf("step %d: reserve %d, settle at %d: %d left, want %d (%d used of 20)", i, st.reserve, st.cost, peek.Remaining, want, used)
				}
			}
			if d := q.allow("k", policy.Limits{}); d.Allowed {
				t.Errorf("after 27 of 20: admitted %+v, want denied", d)
			}
		})
	})
}

// reservationRace is one race of the case: clients racing a
// 20-unit quota of one key, each request reporting cost after the response;
// each client sends until its first refusal. Every client's first request
// is in flight at once: an admitted one finishes only once every client's
// first decision is made, the worst case for a check before the response.
// It returns what was admitted and charged.
func reservationRace(t *testing.T, e *edgelimit.Engine, clients int, cost int64) (admitted, charged int64) {
	t.Helper()
	var a, c atomic.Int64
	var wg, first sync.WaitGroup
	first.Add(clients)
	start := make(chan struct{})
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; ; i++ {
				v := get(e, "/gen", "racer", "")
				if i == 0 {
					first.Done()
				}
				if !v.Allowed {
					v.Release()
					return
				}
				if i == 0 {
					first.Wait()
				}
				a.Add(1)
				c.Add(cost)
				v.ReportCost(cost)
				v.Finish(context.Background(), 200)
				v.Release()
			}
		}()
	}
	close(start)
	wg.Wait()
	return a.Load(), c.Load()
}

// Reservations keep the limit under concurrency (issue 20): 32 and 64
// clients race a 20-unit quota whose requests cost 3, reported after the
// response. Reserving the cost (cost: 3, the default reservation), they
// never charge more than the quota, on every algorithm and store; with
// costs of 5 above their reservations of 3, at most the excesses of the
// requests in flight: 20 + 2 * 6, since at most 6 reservations of 3 fit
// at once. (Before reservations, a request was admitted while one unit was
// left, so all 32 first requests were, and charged 96 units.)
func TestReservationsKeepTheLimit(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			for _, tc := range []struct {
				clients int
				cost    int64
				most    int64
			}{{32, 3, 20}, {64, 3, 20}, {64, 5, 20 + 2*6}} {
				t.Run(fmt.Sprintf("%d-clients-cost-%d", tc.clients, tc.cost), func(t *testing.T) {
					clock := limitertest.NewClock(quotaT0)
					f, err := policy.Parse("race.yaml", []byte(fmt.Sprintf(`version: 1
policies:
  - {name: gen-%s, routes: ["GET /gen"], key: header:X-Api-Key, strategy: durable, algorithm: %s,
     limit: 20, window: 1h, cost: 3, charge: response, store_timeout: 30s}
`, alg, alg)))
					if err != nil {
						t.Fatal(err)
					}
					st := store(t)
					e, err := edgelimit.New(edgelimit.Config{
						Policies: f, HashSecret: []byte(strings.Repeat("h", 32)), Now: clock.Now,
						Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
						Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
							return durablecounter.New(durablecounter.Config{Policy: p, Store: st})
						},
					})
					if err != nil {
						t.Fatal(err)
					}
					admitted, charged := reservationRace(t, e, tc.clients, tc.cost)
					t.Logf("%s: %d clients, cost %d reported after the response: admitted %d, charged %d of 20", alg, tc.clients, tc.cost, admitted, charged)
					if charged > tc.most {
						t.Errorf("charged %d units of a 20-unit quota, want at most %d", charged, tc.most)
					}
					if tc.cost == 3 && admitted < 6 {
						t.Errorf("admitted %d, want 6: every reservation that fits", admitted)
					}
				})
			}
		})
	})
}
