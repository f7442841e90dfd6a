package kvbucket

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// TestRequestLimitsReplaceThePolicys pins issue #12 for kv at fixed
// instants: a request's Limits (a tier's, an override's) replace the
// policy's limit, window and burst for that request, and what the client
// is told (q, w) is theirs. A change under live state keeps the bucket's
// TAT, the instant it is full again, and re-reads it under the request's
// limits: a bucket of (L', W', B') at n holds B' − (TAT − n)·L'/W' tokens,
// at most B'. Before, kv ignored Request.Limits: every tier got the
// policy's 10 a minute.
func TestRequestLimitsReplaceThePolicys(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		for _, noCache := range []bool{false, true} {
			t.Run(fmt.Sprintf("nocache=%v", noCache), func(t *testing.T) {
				clk.Set(t0)
				b := mustNew(t, Config{Policy: kvPolicy(fmt.Sprintf("tiers-%v", noCache), 10, 0, time.Minute, time.Second), KV: k.kv, Now: clk.Now, NoCache: noCache})
				type want struct {
					allowed      bool
					remaining    int64
					q            int64
					w            time.Duration
					reset, retry time.Duration
				}
				step := func(what string, l policy.Limits, cost int64, wt want) {
					t.Helper()
					d, err := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: cost, Limits: l})
					got := want{d.Allowed, d.Remaining, d.Limit, d.Window, d.Reset, d.RetryAfter}
					if err != nil || got != wt {
						t.Errorf("%s: Allow(%d, %+v) at t0+%s = %+v, %v; want %+v", what, cost, l, clk.Now().Sub(t0), got, err, wt)
					}
				}
				pol := policy.Limits{}
				pro := policy.Limits{Limit: 100} // 100 a minute, burst its limit
				slow := policy.Limits{Limit: 2, Burst: 2}
				hourly := policy.Limits{Window: time.Hour}
				// The policy's 10 a minute: 5 spent, the TAT 30s ahead.
				step("policy", pol, 5, want{true, 5, 10, time.Minute, 6 * time.Second, 0})
				// pro reads the same TAT: 30s of 100 a minute is 50 tokens
				// short of its 100.
				step("pro", pro, 1, want{true, 49, 100, time.Minute, 600 * time.Millisecond, 0})
				// Back at the policy's: 30.6s ahead is 5.1 tokens of 10;
				// with this one, 6.1: 3.9 left.
				step("policy after pro", pol, 1, want{true, 3, 10, time.Minute, 600 * time.Millisecond, 0})
				// 2 a minute (a token every 30s) is more than one token
				// short: 36.6s ahead of 60s leaves 0.78 of a token, the
				// next whole one 6.6s away.
				step("slow", slow, 1, want{false, 0, 2, time.Minute, 6600 * time.Millisecond, 6600 * time.Millisecond})
				// 10 an hour: 36.6s is a tenth of a token; 8.9 left after
				// this one, the ninth in 36.6s.
				step("hourly", hourly, 1, want{true, 8, 10, time.Hour, 36600 * time.Millisecond, 0})
				// A minute later, the TAT is 336.6s ahead: under the
				// policy's 60s bucket, 46.1 tokens beyond empty, a debt the
				// client waits out (the next token in 282.6s, ten in
				// 336.6s), not a clock far ahead to repair.
				clk.Add(time.Minute)
				step("policy later", pol, 10, want{false, 0, 10, time.Minute, 282600 * time.Millisecond, 336600 * time.Millisecond})
				clk.Add(336600 * time.Millisecond)
				step("policy once paid", pol, 10, want{true, 0, 10, time.Minute, 6 * time.Second, 0})
			})
		}
	})
}

// TestLimitsSharedDecisionsInRange: instances sharing a key, each request
// with one of several limits (a key whose requests carry different tiers:
// one address, several plans), decide within the quota each is told, and
// a denial's RetryAfter is never before its Reset.
func TestLimitsSharedDecisionsInRange(t *testing.T) {
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{Now: clk.Now})
	pol := kvPolicy("mixed", 7, 12, 3*time.Second, 500*time.Millisecond)
	var inst []*Bucket
	for range 4 {
		inst = append(inst, mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now}))
	}
	limits := []policy.Limits{{}, {Limit: 70}, {Limit: 2, Burst: 3}, {Window: time.Minute}, {Burst: 40}}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20000 {
		clk.Add(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
		b := inst[rng.IntN(len(inst))]
		req := edgelimit.Request{Key: "k", Cost: rng.Int64N(4), Limits: limits[rng.IntN(len(limits))]}
		d, err := b.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining > d.Limit || d.Remaining < 0 || d.Reset <= 0 || !d.Allowed && d.RetryAfter < d.Reset {
			t.Fatalf("step %d (%+v): %+v", i, req.Limits, d)
		}
		if d.Allowed && rng.IntN(10) == 0 {
			if err := b.Refund(ctx, req, d); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestLimitsBeyondTheScaleFail: limits whose token the policy's scale
// cannot hold are an error (the engine's on_store_error decides), never a
// wrong answer.
func TestLimitsBeyondTheScaleFail(t *testing.T) {
	b := mustNew(t, Config{Policy: kvPolicy("scale", MaxTokens, 0, time.Nanosecond, 0), KV: NewMemory(MemoryConfig{})})
	_, err := b.Allow(ctx, edgelimit.Request{Key: "k", Limits: policy.Limits{Limit: 1, Window: 100 * 365 * 24 * time.Hour}})
	if !errors.Is(err, ErrConfig) {
		t.Errorf("a token of a century on a policy of 10^9 a nanosecond: %v, want ErrConfig", err)
	}
	if _, err := b.Allow(ctx, edgelimit.Request{Key: "k", Limits: policy.Limits{Limit: MaxTokens + 1}}); !errors.Is(err, ErrConfig) {
		t.Errorf("a limit beyond MaxTokens: %v, want ErrConfig", err)
	}
}

// TestLimitsChangeUnderConcurrency (issue #12.4 for kv): 64 goroutines
// on one key of one instance (one Bucket) against each KV, while an
// operator raises and lowers the key's limit (the Request.Limits an
// override gives) between and during phases; the clock moves on a second
// per phase. Every admitted request's decision says the limit it was
// decided under. With a burst of the limit, a token of limit L is 1h/L and
// the bucket's tolerance is 1h whatever L is, so one instance, which is
// exactly a token bucket, never admits more than the limit in force at
// each decision's instant: the emission intervals of the admissions fit in
// the tolerance plus the time that passed. And it denies nothing the
// bucket held: they take at least the tolerance less one token of the
// smallest limit a whole phase had.
func TestLimitsChangeUnderConcurrency(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		schedule := []struct{ before, during int64 }{{20, 25}, {5, 2}, {40, 50}, {30, 3}, {10, 60}, {45, 15}}
		perClient := 2
		if k.name == "moto" {
			schedule, perClient = schedule[:4], 1 // moto answers one call at a time
		}
		b := mustNew(t, Config{Policy: kvPolicy("live", 10, 0, time.Hour, time.Second), KV: k.kv, Now: clk.Now})
		var limit atomic.Int64
		var mu sync.Mutex
		var admitted []int64
		denied := 0
		least := int64(0)
		for phase, l := range schedule {
			clk.Set(t0.Add(time.Duration(phase) * time.Second))
			limit.Store(l.before)
			if l.during > l.before {
				least = max(least, l.before)
			}
			var wg sync.WaitGroup
			wg.Go(func() { limit.Store(l.during) }) // the operator, while the clients ask
			for range 64 {
				wg.Go(func() {
					for range perClient {
						req := edgelimit.Request{Key: "the-key", Limits: policy.Limits{Limit: limit.Load()}}
						d, err := b.Allow(ctx, req)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						if d.Allowed {
							admitted = append(admitted, d.Limit)
						} else {
							denied++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
		}
		if len(admitted) < 3 || denied == 0 {
			t.Fatalf("%d admitted, %d denied: the test did not reach the limits", len(admitted), denied)
		}
		elapsed := time.Duration(len(schedule)-1) * time.Second
		var used time.Duration
		for _, l := range admitted {
			used += time.Hour / time.Duration(l)
		}
		if used > time.Hour+elapsed {
			t.Errorf("the %d admissions took %s of emission intervals, more than the tolerance (1h) and the %s that passed: more than the limits in force", len(admitted), used, elapsed)
		}
		if used < time.Hour-time.Hour/time.Duration(least) {
			t.Errorf("the %d admissions took only %s of the 1h tolerance: spurious denials", len(admitted), used)
		}
		t.Logf("%s: %d admitted (%s of the 1h tolerance), %d denied over %d limit changes", k.name, len(admitted), used, denied, 2*len(schedule))
	})
}
