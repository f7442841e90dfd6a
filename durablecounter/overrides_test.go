package durablecounter_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
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
	"github.com/edgelimit/edgelimit/overrides"
	ovrdynamo "github.com/edgelimit/edgelimit/overrides/dynamostore"
	"github.com/edgelimit/edgelimit/policy"
)

// Tiers and overrides through the root engine, with durable counters and
// an override store, on the memory stores and each real server (the
// override items in the counters' table).

// quotaBackend is where one test keeps its counts and overrides; calls
// counts the override store's reads.
type quotaBackend struct {
	name      string
	store     durablecounter.Store
	overrides edgelimit.OverrideStore
	reads     func() int
}

// countingOverrides counts the reads of an override store.
type countingOverrides struct {
	edgelimit.OverrideStore
	n atomic.Int64
}

func (c *countingOverrides) Override(ctx context.Context, pol, key string) (policy.Limits, bool, error) {
	c.n.Add(1)
	return c.OverrideStore.Override(ctx, pol, key)
}

// forEachQuotaBackend runs f on memory stores and on each real server, in
// parallel; clock is the override store's clock.
func forEachQuotaBackend(t *testing.T, clock func() time.Time, f func(t *testing.T, b quotaBackend)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		ovr := &countingOverrides{OverrideStore: overrides.NewMemory(clock)}
		f(t, quotaBackend{name: "memory", store: durablecounter.NewMemory(durablecounter.MemoryConfig{}), overrides: ovr,
			reads: func() int { return int(ovr.n.Load()) }})
	})
	if os.Getenv(ddbtest.EnvDynalite) == "" && os.Getenv(ddbtest.EnvMoto) == "" {
		t.Log("no DynamoDB-API server: only the memory stores (run the tests through internal/tools/testservers)")
		return
	}
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		client, table, _ := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		// The override store has a client of its own, so that its calls
		// are counted apart from the counters'.
		oc, calls := ddbtest.Client(t, s)
		ovr, err := ovrdynamo.New(ovrdynamo.Config{Client: oc, Table: table, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		f(t, quotaBackend{name: s.Name, store: store, overrides: ovr, reads: func() int { return calls.Op("GetItem") }})
	})
}

// quotaEngine is one instance: an engine on b's stores, deciding at the
// clock's instants. The policies give the store 30 s: the servers are
// shared with other tests, and a call the engine's budget cancels
// mid-request crashes dynalite (it throws on an aborted request).
func quotaEngine(t *testing.T, policies string, b quotaBackend, clock func() time.Time) *edgelimit.Engine {
	t.Helper()
	f, err := policy.Parse("quota.yaml", []byte(policies))
	if err != nil {
		t.Fatal(err)
	}
	e, err := edgelimit.New(edgelimit.Config{
		Policies: f, HashSecret: []byte(strings.Repeat("h", 32)), Overrides: b.overrides, Now: clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return durablecounter.New(durablecounter.Config{Policy: p, Store: b.store})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func get(e *edgelimit.Engine, path, key, plan string) *edgelimit.Verdict {
	h := limitertest.Headers{"X-Api-Key": key}
	if plan != "" {
		h["X-Plan"] = plan
	}
	return e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: path, SourceIP: "203.0.113.9", Header: h})
}

func headerOf(v *edgelimit.Verdict, name string) string {
	for _, f := range v.Header() {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// The tier a request names reaches the algorithm through the engine: a
// pro key gets 30, a free one 3, and the headers show each tier's quota.
func TestTiersThroughTheEngine(t *testing.T) {
	t.Parallel()
	clock := limitertest.NewClock(quotaT0)
	forEachQuotaBackend(t, clock.Now, func(t *testing.T, b quotaBackend) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			e := quotaEngine(t, fmt.Sprintf(`version: 1
policies:
  - name: api-%s
    routes: ["GET /api/*"]
    key: header:X-Api-Key
    strategy: durable
    algorithm: %s
    limit: 3
    window: 1h
    store_timeout: 30s
    tiers:
      by: header:X-Plan
      default: free
      levels: {free: {limit: 3}, pro: {limit: 30}}
`, alg, alg), b, clock.Now)
			count := func(key, plan string) (n int, pol string) {
				for range 40 {
					v := get(e, "/api/x", key, plan)
					if !v.Allowed {
						return n, pol
					}
					n, pol = n+1, headerOf(v, "RateLimit-Policy")
				}
				return n, pol
			}
			if n, rp := count("pro-key", "pro"); n != 30 || rp != fmt.Sprintf(`"api-%s";q=30;w=3600`, alg) {
				t.Errorf("pro: %d admitted, RateLimit-Policy %s; want 30, q=30", n, rp)
			}
			if n, rp := count("free-key", ""); n != 3 || rp != fmt.Sprintf(`"api-%s";q=3;w=3600`, alg) {
				t.Errorf("free (no plan): %d admitted, RateLimit-Policy %s; want 3, q=3", n, rp)
			}
		})
	})
}

// admission is one admitted request: the quota it was decided under (what
// its decision told), for the invariants.
type admission struct{ limit int64 }

// Issue #12.4: 64 clients on one key through two engine instances while
// an operator raises and lowers the key's override. The schedule is
// recorded: the engine's clock moves on a second per phase (the override
// staleness is a second, so the other instance reads the override again
// each phase), and every admitted request's decision says the limit in
// force when it was decided. Within the hour's window nothing frees
// units, so the invariant is, for the windows: for every x, at most x of
// the requests decided under a limit of at most x were admitted (a count
// that holds each admission within its own limit can be ordered no other
// way); for gcra, whose emission interval follows the limit (T = 1h/L,
// tolerance 1h), the intervals the admissions took fit in the tolerance
// plus the time that passed.
func TestOverrideChangesUnderConcurrency(t *testing.T) {
	t.Parallel()
	clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour))
	forEachQuotaBackend(t, clock.Now, func(t *testing.T, b quotaBackend) {
		// Each phase: the override set before the clients start, and
		// changed again while they ask (raised in even phases, lowered in
		// odd ones).
		schedule := []struct{ before, during int64 }{{20, 25}, {5, 2}, {40, 50}, {30, 3}, {10, 60}, {45, 15}}
		perClient := 2
		if b.name == "moto" {
			schedule, perClient = schedule[:4], 1 // moto answers one call at a time
		}
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			start := limitertest.WindowStart(limitertest.T0, time.Hour)
			now := limitertest.NewClock(start)
			policies := fmt.Sprintf(`version: 1
policies:
  - {name: live-%s, routes: ["GET /live"], key: header:X-Api-Key, strategy: durable, algorithm: %s,
     limit: 10, window: 1h, overrides: true, override_staleness: 1s, store_timeout: 30s}
`, alg, alg)
			a, other := quotaEngine(t, policies, b, now.Now), quotaEngine(t, policies, b, now.Now)
			pol := "live-" + alg
			var mu sync.Mutex
			var admitted []admission
			denied := 0
			ctx := context.Background()
			least := int64(0) // every request of a raising phase had at least this limit
			for phase, limits := range schedule {
				now.Set(start.Add(time.Duration(phase) * time.Second))
				if err := a.SetOverride(ctx, pol, "the-key", policy.Limits{Limit: limits.before}, time.Time{}); err != nil {
					t.Fatal(err)
				}
				if limits.during > limits.before {
					least = max(least, limits.before)
				}
				var wg sync.WaitGroup
				wg.Add(1)
				go func() { // the operator, while the clients ask
					defer wg.Done()
					if err := a.SetOverride(ctx, pol, "the-key", policy.Limits{Limit: limits.during}, time.Time{}); err != nil {
						t.Error(err)
					}
				}()
				for client := range 64 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						e := a
						if client%2 == 1 {
							e = other
						}
						for range perClient {
							v := get(e, "/live", "the-key", "")
							if v.Status >= 500 || len(v.Decisions) != 1 {
								t.Errorf("request: status %d, %d decisions", v.Status, len(v.Decisions))
								return
							}
							mu.Lock()
							if v.Allowed {
								admitted = append(admitted, admission{v.Decisions[0].Limit})
							} else {
								denied++
							}
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
			}
			elapsed := time.Duration(len(schedule)-1) * time.Second
			if len(admitted) < 3 || denied == 0 {
				t.Fatalf("%d admitted, %d denied: the test did not reach the limits", len(admitted), denied)
			}
			if alg == string(durablecounter.GCRA) {
				var used time.Duration
				for _, ad := range admitted {
					used += time.Hour / time.Duration(ad.limit)
				}
				if used > time.Hour+elapsed {
					t.Errorf("gcra: the %d admissions took %s of emission intervals, more than the tolerance (1h) and the %s that passed", len(admitted), used, elapsed)
				}
				// And the bucket was emptied: no spurious denial.
				if used < time.Hour-time.Hour/time.Duration(least) {
					t.Errorf("gcra: the %d admissions took only %s of the 1h tolerance", len(admitted), used)
				}
			} else {
				if int64(len(admitted)) < least {
					t.Errorf("%d admitted, but every request of one phase had a limit of at least %d: spurious denials", len(admitted), least)
				}
				limits := make([]int64, len(admitted))
				for i, ad := range admitted {
					limits[i] = ad.limit
				}
				slices.Sort(limits)
				for i, l := range limits {
					if int64(i+1) > l {
						t.Errorf("%d requests were admitted under a limit of at most %d: more than the limit in force when they were decided (limits of the admissions: %v)", i+1, l, limits)
						break
					}
				}
			}
			t.Logf("%s on %s: %d admitted, %d denied over %d override changes", alg, b.name, len(admitted), denied, len(schedule))
		})
	})
}

// Overrides cost at most one read per key per staleness interval per
// instance, and nothing for a policy without them.
func TestOverridesCostOneReadPerStaleness(t *testing.T) {
	t.Parallel()
	clock := limitertest.NewClock(quotaT0)
	forEachQuotaBackend(t, clock.Now, func(t *testing.T, b quotaBackend) {
		now := limitertest.NewClock(quotaT0)
		policies := `version: 1
policies:
  - {name: managed, routes: ["GET /managed"], key: header:X-Api-Key, strategy: durable, limit: 1000, window: 1h,
     overrides: true, override_staleness: 10s, store_timeout: 30s}
  - {name: plain, routes: ["GET /plain"], key: header:X-Api-Key, strategy: durable, limit: 1000, window: 1h, store_timeout: 30s}
`
		a, other := quotaEngine(t, policies, b, now.Now), quotaEngine(t, policies, b, now.Now)
		reads := func(what string, want int, f func()) {
			t.Helper()
			before := b.reads()
			f()
			if got := b.reads() - before; got != want {
				t.Errorf("%s: %d override reads, want %d", what, got, want)
			}
		}
		many := func(e *edgelimit.Engine, path, key string, n int) func() {
			return func() {
				for range n {
					if v := get(e, path, key, ""); !v.Allowed {
						t.Fatalf("%s %s: %d", path, key, v.Status)
					}
				}
			}
		}
		reads("20 requests of one key", 1, many(a, "/managed", "k1", 20))
		reads("another key", 1, many(a, "/managed", "k2", 5))
		reads("the first key on another instance", 1, many(other, "/managed", "k1", 5))
		now.Advance(9 * time.Second)
		reads("9s later", 0, many(a, "/managed", "k1", 5))
		now.Advance(time.Second)
		reads("10s later (the staleness)", 1, many(a, "/managed", "k1", 5))
		reads("a policy without overrides", 0, many(a, "/plain", "k1", 20))
	})
}

// Charging after the response through the engine (issue #13, part 1): a
// request is admitted while one unit is left, the handler reports what it
// really cost, and the over-spend is allowed once, then the key is denied
// (r=0) until the window frees it. With charge_status, only the statuses
// named spend (failed logins).
func TestChargeAfterTheResponseThroughTheEngine(t *testing.T) {
	t.Parallel()
	clock := limitertest.NewClock(quotaT0)
	forEachQuotaBackend(t, clock.Now, func(t *testing.T, b quotaBackend) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			now := limitertest.NewClock(quotaT0)
			e := quotaEngine(t, fmt.Sprintf(`version: 1
policies:
  - {name: tokens-%s, routes: ["GET /tts"], key: header:X-Api-Key, strategy: durable, algorithm: %s,
     limit: 100, window: 1h, charge: response, store_timeout: 30s}
  - {name: logins-%s, routes: ["GET /login"], key: header:X-Api-Key, strategy: durable, algorithm: %s,
     limit: 2, window: 1h, charge_status: [401, 403], store_timeout: 30s}
`, alg, alg, alg, alg), b, now.Now)
			ctx := context.Background()
			serve := func(path string, cost int64, status int) *edgelimit.Verdict {
				v := get(e, path, "k", "")
				if v.Allowed {
					v.ReportCost(cost)
					v.Finish(ctx, status)
				}
				return v
			}
			if v := serve("/tts", 60, 200); !v.Allowed {
				t.Fatalf("first request: %d", v.Status)
			}
			// 40 left: admitted (one unit is left), and it really costs 70.
			if v := serve("/tts", 70, 200); !v.Allowed || headerOf(v, "RateLimit") == "" {
				t.Fatalf("second request with 40 left: %d", v.Status)
			}
			v := serve("/tts", 1, 200)
			if v.Allowed || v.Status != 429 || !strings.Contains(headerOf(v, "RateLimit"), ";r=0;") {
				t.Errorf("after the over-spend (130 of 100): %d, RateLimit %s; want 429 with r=0", v.Status, headerOf(v, "RateLimit"))
			}
			for i, status := range []int{200, 401, 200, 403} {
				if v := serve("/login", 1, status); !v.Allowed {
					t.Fatalf("login %d: %d, want admitted (only 401 and 403 spend)", i+1, v.Status)
				}
			}
			if v := serve("/login", 1, 401); v.Allowed {
				t.Errorf("a login after two failed: admitted, want 429")
			}
		})
	})
}
