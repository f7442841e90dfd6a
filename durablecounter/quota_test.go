package durablecounter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// The quotas of issue #12 on the Counter: the limits in force for a
// request (a tier's, an override's), reset, grant and charge, on the
// memory store and each real server, at fixed instants.

// newStore makes a fresh store for one test.
type newStore func(t *testing.T) durablecounter.Store

// forEachStore runs f on the memory store and on each real server the
// runner started, in parallel.
func forEachStore(t *testing.T, f func(t *testing.T, store newStore)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		f(t, func(*testing.T) durablecounter.Store { return durablecounter.NewMemory(durablecounter.MemoryConfig{}) })
	})
	if os.Getenv(ddbtest.EnvDynalite) == "" && os.Getenv(ddbtest.EnvMoto) == "" {
		t.Log("no DynamoDB-API server: only the memory store (run the tests through internal/tools/testservers)")
		return
	}
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		f(t, func(t *testing.T) durablecounter.Store { return dynamoStore(t, s, dynamostore.TransactionsAuto) })
	})
}

// quotaT0 is half an hour into an hour: fixed windows of an hour and of
// half an hour start at quotaT0 - 30m and quotaT0.
var quotaT0 = limitertest.WindowStart(limitertest.T0, time.Hour).Add(30 * time.Minute)

type quotaCounter struct {
	t *testing.T
	c *durablecounter.Counter
}

func newQuotaCounter(t *testing.T, store durablecounter.Store, clock *limitertest.Clock, p *policy.Policy) quotaCounter {
	t.Helper()
	c, err := durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return quotaCounter{t, c}
}

func quotaPolicy(name, alg string, limit int64, window time.Duration) *policy.Policy {
	return &policy.Policy{Name: name, Limit: limit, Window: window, Overrides: true,
		Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), DenyCache: true}}
}

func (q quotaCounter) allow(key string, l policy.Limits) edgelimit.Decision {
	q.t.Helper()
	d, err := q.c.Allow(context.Background(), edgelimit.Request{Key: key, Limits: l})
	if err != nil {
		q.t.Fatalf("Allow(%q, %+v): %v", key, l, err)
	}
	return d
}

// spend allows until the first denial and returns how many were admitted.
func (q quotaCounter) spend(key string, l policy.Limits, most int) int {
	q.t.Helper()
	for i := range most + 1 {
		if d := q.allow(key, l); !d.Allowed {
			return i
		}
	}
	q.t.Fatalf("%q under %+v: more than %d admitted", key, l, most)
	return 0
}

// A tier's limits reach the algorithm: the pro tier's key gets 30, the
// free tier's 3 (the policy's), and each decision tells its own quota.
func TestTierReachesTheAlgorithm(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			for _, shards := range []int{1, 3} {
				t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
					clock := limitertest.NewClock(quotaT0)
					p := quotaPolicy("tiers-"+alg, alg, 3, time.Hour)
					p.Options.(*durablecounter.Options).Shards = shards
					q := newQuotaCounter(t, store(t), clock, p)
					pro := policy.Limits{Limit: 30}
					if d := q.allow("pro-key", pro); !d.Allowed || d.Limit != 30 || d.Window != time.Hour || d.Remaining > 29 {
						t.Errorf("pro's first request = %+v, want allowed, Limit 30, Window 1h", d)
					}
					if got := 1 + q.spend("pro-key", pro, 30); got != 30 {
						t.Errorf("pro tier admitted %d, want 30", got)
					}
					if d := q.allow("free-key", policy.Limits{}); !d.Allowed || d.Limit != 3 {
						t.Errorf("free's first request = %+v, want allowed, Limit 3", d)
					}
					if got := 1 + q.spend("free-key", policy.Limits{}, 3); got != 3 {
						t.Errorf("free tier admitted %d, want 3", got)
					}
				})
			}
		})
	})
}

// A limits step: at an offset from quotaT0, a request under limits (zero:
// the policy's), and what its decision says.
type limitsStep struct {
	at         time.Duration
	limits     policy.Limits
	allowed    bool
	remaining  int64
	limit      int64
	window     time.Duration
	retryAfter time.Duration // checked on denials
}

// The limits of a key change under live state (an override set, raised,
// lowered, a window changed), at fixed instants. What was spent stays
// spent and the new limit applies to it; a window of its own counts in
// items of its own (fixed and sliding window, sliding log); gcra keeps its
// TAT and reads it with the new emission interval.
func TestLimitsChangeUnderLiveState(t *testing.T) {
	t.Parallel()
	up, down := policy.Limits{Limit: 20}, policy.Limits{Limit: 3}
	halfHour := policy.Limits{Window: 30 * time.Minute}
	windowed := []limitsStep{
		{0, policy.Limits{}, true, 9, 10, time.Hour, 0},
		{0, policy.Limits{}, true, 8, 10, time.Hour, 0},
		{0, policy.Limits{}, true, 7, 10, time.Hour, 0},
		{0, policy.Limits{}, true, 6, 10, time.Hour, 0},
		// Raised to 20: the 4 spent stay spent.
		{0, up, true, 15, 20, time.Hour, 0},
		// Lowered to 3: 5 are spent, nothing is left.
		{time.Second, down, false, 0, 3, time.Hour, 0},
		// Back to the policy's: 5 of 10.
		{2 * time.Second, policy.Limits{}, true, 4, 10, time.Hour, 0},
		// A window of its own: its own count, from nothing.
		{3 * time.Second, halfHour, true, 9, 10, 30 * time.Minute, 0},
		{3 * time.Second, halfHour, true, 8, 10, 30 * time.Minute, 0},
		// and the hour's count is where it was.
		{4 * time.Second, policy.Limits{}, true, 3, 10, time.Hour, 0},
	}
	fixed := append([]limitsStep(nil), windowed...)
	fixed[5].retryAfter = 30*time.Minute - time.Second // until the hour's window ends
	sliding := append([]limitsStep(nil), windowed...)
	sliding[5].retryAfter = -1 // checked by TestChargeOverSpends' rule instead
	log := append([]limitsStep(nil), windowed...)
	log[5].retryAfter = time.Hour - time.Second // until the oldest of the 5 leaves the hour
	// gcra 10/h: T = 6m, tolerance 1h. The TAT is kept: 4 spent put it
	// 24m ahead.
	gcraSteps := []limitsStep{
		{0, policy.Limits{}, true, 9, 10, time.Hour, 0},
		{0, policy.Limits{}, true, 8, 10, time.Hour, 0},
		{0, policy.Limits{}, true, 7, 10, time.Hour, 0},
		{0, policy.Limits{}, true, 6, 10, time.Hour, 0},
		// 20/h (T = 3m, burst 20 since the policy's burst is its limit): the
		// TAT 24m ahead is 8 units of 3m; this request takes the 9th.
		{0, up, true, 11, 20, time.Hour, 0},
		// 3/h (T = 20m, burst 3): 27m ahead; 3 units would need 27m + 20m
		// <= 60m: yes, then 47m ahead, nothing left.
		{0, down, true, 0, 3, time.Hour, 0},
		{0, down, false, 0, 3, time.Hour, 7 * time.Minute}, // until 47m + 20m <= 60m
		// The policy's 10/h: 47m + 6m <= 60m.
		{0, policy.Limits{}, true, 1, 10, time.Hour, 0},
		// 10 per 2h (T = 12m, tolerance 2h): 53m ahead, 67m of room: this
		// request takes one of 5 units.
		{0, policy.Limits{Window: 2 * time.Hour}, true, 4, 10, 2 * time.Hour, 0},
	}
	steps := map[string][]limitsStep{
		string(durablecounter.FixedWindow):   fixed,
		string(durablecounter.SlidingWindow): sliding,
		string(durablecounter.SlidingLog):    log,
		string(durablecounter.GCRA):          gcraSteps,
	}
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			clock := limitertest.NewClock(quotaT0)
			q := newQuotaCounter(t, store(t), clock, quotaPolicy("live-"+alg, alg, 10, time.Hour))
			for i, s := range steps[alg] {
				clock.Set(quotaT0.Add(s.at))
				d := q.allow("k", s.limits)
				if d.Allowed != s.allowed || d.Remaining != s.remaining || d.Limit != s.limit || d.Window != s.window {
					t.Errorf("step %d (%+v at +%s): %+v, want allowed %v, Remaining %d, Limit %d, Window %s",
						i, s.limits, s.at, d, s.allowed, s.remaining, s.limit, s.window)
				}
				if !s.allowed && s.retryAfter > 0 && d.RetryAfter != s.retryAfter {
					t.Errorf("step %d: RetryAfter %s, want %s", i, d.RetryAfter, s.retryAfter)
				}
			}
		})
	})
}

// A raised limit is honoured although this instance's deny cache holds the
// denial under the old one (kept here for an hour, so that only checking
// the cached state with the limits in force can admit): at once for the
// windows, and for gcra as soon as its TAT, read with the new emission
// interval, lets a unit through (12m at 5/h where 3/h needs 20m). A
// lowered limit denies from the cache as well as from the store.
func TestDenyCacheChecksTheLimitsInForce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			clock := limitertest.NewClock(quotaT0)
			c, err := durablecounter.New(durablecounter.Config{Policy: quotaPolicy("cache-"+alg, alg, 3, time.Hour),
				Store: store(t), Now: clock.Now, DenyCacheMaxAge: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			q := quotaCounter{t, c}
			if got := q.spend("k", policy.Limits{}, 3); got != 3 {
				t.Fatalf("admitted %d of 3", got)
			}
			if d := q.allow("k", policy.Limits{}); d.Allowed {
				t.Fatalf("after 3 of 3: %+v", d)
			}
			raised, want := policy.Limits{Limit: 5}, 2
			if alg == string(durablecounter.GCRA) {
				if d := q.allow("k", raised); d.Allowed {
					t.Errorf("gcra raised to 5/h with the bucket empty: %+v, want a denial until a unit comes back", d)
				}
				clock.Advance(12 * time.Minute)
				want = 1
			}
			if got := q.spend("k", raised, 2); got != want {
				t.Errorf("raised to 5 with 3 spent (and the denial cached): %d admitted, want %d", got, want)
			}
			if d := q.allow("k", policy.Limits{Limit: 2}); d.Allowed {
				t.Errorf("lowered to 2: %+v, want a denial", d)
			}
		})
	})
}

// Limits the policy cannot enforce are refused with ErrLimits, as a store
// failure (the engine's on_store_error decides), never silently replaced.
func TestLimitsThatCannotBeEnforced(t *testing.T) {
	p := quotaPolicy("bad", string(durablecounter.SlidingLog), 10, time.Hour)
	c, err := durablecounter.New(durablecounter.Config{Policy: p, Store: durablecounter.NewMemory(durablecounter.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []policy.Limits{
		{Window: 1500 * time.Microsecond},
		{Limit: durablecounter.MaxSlidingLogLimit + 1},
	} {
		if _, err := c.Allow(context.Background(), edgelimit.Request{Key: "k", Limits: l}); !errors.Is(err, durablecounter.ErrLimits) {
			t.Errorf("Allow with %+v: %v, want ErrLimits", l, err)
		}
	}
}

// Charge spends whether or not the units fit: the over-spend is allowed
// once, the key is then denied (r = 0) until its window frees enough, and
// the decision's RetryAfter says exactly when.
func TestChargeOverSpends(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			ctx := context.Background()
			clock := limitertest.NewClock(quotaT0)
			q := newQuotaCounter(t, store(t), clock, quotaPolicy("charge-"+alg, alg, 10, time.Hour))
			req := edgelimit.Request{Key: "k", Cost: 4}
			d, err := q.c.Charge(ctx, req)
			if err != nil || !d.Allowed || d.Remaining != 6 {
				t.Fatalf("Charge(4) of 10 = %+v, %v; want allowed, Remaining 6", d, err)
			}
			req.Cost = 10
			d, err = q.c.Charge(ctx, req)
			if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Fatalf("Charge(10) with 6 left = %+v, %v; want the state after: denied, Remaining 0, a RetryAfter", d, err)
			}
			wait := d.RetryAfter
			if p, err := q.c.Peek(ctx, edgelimit.Request{Key: "k"}); err != nil || p.Allowed || p.Remaining != 0 {
				t.Errorf("Peek of one unit after the over-spend = %+v, %v; want denied, r=0", p, err)
			}
			clock.Advance(wait - time.Millisecond)
			if d := q.allow("k", policy.Limits{}); d.Allowed {
				t.Errorf("1ms before the charge's RetryAfter (%s): %+v, want denied", wait, d)
			}
			clock.Advance(time.Millisecond)
			if d := q.allow("k", policy.Limits{}); !d.Allowed {
				t.Errorf("at the charge's RetryAfter (%s): %+v, want allowed", wait, d)
			}
		})
	})
}

// The limits in force reach a batch's members too, sharded or not, and a
// sharded policy's grant pays once every shard is spent.
func TestLimitsInABatchAndShards(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store newStore) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			ctx := context.Background()
			clock := limitertest.NewClock(quotaT0)
			s := store(t)
			a := newQuotaCounter(t, s, clock, quotaPolicy("la-"+alg, alg, 2, time.Hour))
			sp := quotaPolicy("lb-"+alg, alg, 4, time.Hour)
			sp.Options.(*durablecounter.Options).Shards = 2
			b := newQuotaCounter(t, s, clock, sp)
			items := []edgelimit.BatchItem{
				{Limiter: a.c, Request: edgelimit.Request{Key: "k", Limits: policy.Limits{Limit: 20}}},
				{Limiter: b.c, Request: edgelimit.Request{Key: "k", Limits: policy.Limits{Limit: 6}}},
			}
			admitted := 0
			for range 10 {
				ds, err := a.c.AllowBatch(ctx, items)
				if err != nil {
					t.Fatal(err)
				}
				if ds[0].Limit != 20 || ds[1].Limit != 6 {
					t.Fatalf("batch decisions tell %d and %d, want the limits in force 20 and 6", ds[0].Limit, ds[1].Limit)
				}
				if ds[0].Allowed && ds[1].Allowed {
					admitted++
				}
			}
			if admitted != 6 {
				t.Errorf("batches admitted: %d, want 6 (b's 6 in force over 2 shards)", admitted)
			}
			if err := b.c.Grant(ctx, edgelimit.Request{Key: "k"}, 2, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if got := b.spend("k", policy.Limits{Limit: 6}, 3); got != 2 {
				t.Errorf("the sharded policy with every shard spent and a grant of 2: %d admitted, want 2", got)
			}
		})
	})
}
