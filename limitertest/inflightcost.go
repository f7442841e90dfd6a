package limitertest

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// This file is RunInFlight's part for requests that hold several slots
// (an in-flight policy's cost, or the application's reservation: "at most
// 8 GPU-seconds running", a 3-second job holding 3): a take of n units is
// all or nothing, its release gives back all n, and a lease that ends
// frees all n together.

// runCosts runs the subtests of requests of several units.
func (s *flightSuite) runCosts(t *testing.T) {
	t.Run("CostTakeRelease", s.testCostTakeRelease)
	t.Run("CostNeverFits", s.testCostNeverFits)
	t.Run("CostLeaseBoundary", s.testCostLeaseBoundary)
	t.Run("CostAllFit", s.testCostAllFit)
	t.Run("CostRounds", s.testCostRounds)
	t.Run("CostChurn", s.testCostChurn)
}

// reqCost is a request of key holding units slots.
func reqCost(key string, units int64) edgelimit.Request {
	return edgelimit.Request{Key: key, Cost: units}
}

// mixedCost is the cost of the i-th client of the concurrency tests: 1, 2,
// 3, 1, 2, 3, ...
func mixedCost(i int) int64 { return 1 + int64(i%3) }

// testCostTakeRelease: at fixed instants, a request of n units is admitted
// only when n slots are free, takes all n, and its release (or refund)
// gives all n back; a release with other units gives back nothing.
func (s *flightSuite) testCostTakeRelease(t *testing.T) {
	e := s.newEnv(t, 8, time.Minute)
	a := e.want(reqCost("k", 3), true, 5)
	b := e.want(reqCost("k", 3), true, 2)
	e.want(reqCost("k", 3), false, 2) // 2 free: none of the 3 is taken
	if d := e.peek(reqCost("k", 2)); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("peek of 2 with 2 free = %+v, want allowed, 2 free", d)
	}
	if d := e.peek(reqCost("k", 3)); d.Allowed || d.Remaining != 2 {
		t.Fatalf("peek of 3 with 2 free = %+v, want denied, 2 free", d)
	}
	c := e.want(reqCost("k", 2), true, 0)
	e.want(reqCost("k", 1), false, 0)
	// A release with the wrong units gives back nothing; with its own,
	// all three.
	e.finish(reqCost("k", 1), a)
	e.want(reqCost("k", 1), false, 0)
	e.finish(reqCost("k", 3), a)
	if d := e.peek(reqCost("k", 1)); d.Remaining != 3 {
		t.Fatalf("after releasing a holder of 3: %d free, want 3", d.Remaining)
	}
	e.finish(reqCost("k", 3), a) // twice: nothing of the others
	e.want(reqCost("k", 4), false, 3)
	d := e.want(reqCost("k", 3), true, 0)
	if err := e.lim.Refund(e.ctx, reqCost("k", 3), d); err != nil {
		t.Fatal(err)
	}
	e.want(reqCost("k", 2), true, 1)
	e.finish(reqCost("k", 3), b)
	e.finish(reqCost("k", 2), c)
	e.want(reqCost("k", 6), true, 0)
}

// testCostNeverFits: a request of more units than the limit in force (an
// override's, an application's reservation) is denied without taking any,
// told to wait a lease, and leaves every slot as it was.
func (s *flightSuite) testCostNeverFits(t *testing.T) {
	e := s.newEnv(t, 4, time.Minute)
	e.want(reqCost("k", 1), true, 3)
	for range 2 {
		d := e.want(reqCost("k", 5), false, 3)
		if d.RetryAfter != time.Minute {
			t.Errorf("a take of 5 with limit 4: RetryAfter %s, want the lease 1m", d.RetryAfter)
		}
	}
	if d := e.peek(reqCost("k", 5)); d.Allowed || d.Remaining != 3 {
		t.Errorf("peek of 5 with limit 4 = %+v, want denied, 3 free", d)
	}
	r := reqCost("k", 3)
	r.Limits = policy.Limits{Limit: 2}
	e.want(r, false, 1) // an override of 2: 3 never fit
	e.want(reqCost("k", 3), true, 0)
}

// testCostLeaseBoundary: a holder of several units that is never released
// (its instance crashed) holds all of them until its lease ends, and all
// of them come back at that instant; its late release then gives back
// nothing of the holders that reclaimed them.
func (s *flightSuite) testCostLeaseBoundary(t *testing.T) {
	const lease = 10 * time.Second
	e := s.newEnv(t, 4, lease)
	crashed := e.want(reqCost("k", 3), true, 1) // never released
	e.clock.Set(T0.Add(lease / 2))
	e.want(reqCost("k", 1), true, 0) // its lease ends at T0 + 1.5 leases
	e.clock.Set(T0.Add(lease - time.Nanosecond))
	d := e.want(reqCost("k", 1), false, 0)
	if d.RetryAfter != time.Nanosecond {
		t.Errorf("1ns before the lease of the holder of 3 ends: RetryAfter %s, want 1ns", d.RetryAfter)
	}
	e.clock.Set(T0.Add(lease))
	if p := e.peek(reqCost("k", 3)); !p.Allowed || p.Remaining != 3 {
		t.Fatalf("peek as the lease of the holder of 3 ends = %+v, want allowed, 3 free", p)
	}
	e.want(reqCost("k", 3), true, 0) // reclaims all three at once
	e.finish(reqCost("k", 3), crashed)
	e.want(reqCost("k", 1), false, 0)
}

// testCostAllFit: 64 clients of mixed costs (1, 2, 3) take slots of one
// key at once whose units sum to the limit: every one is admitted, and
// the next take is not.
func (s *flightSuite) testCostAllFit(t *testing.T) {
	n := s.opts.Goroutines
	var sum int64
	for i := range n {
		sum += mixedCost(i)
	}
	e := s.newEnv(t, sum, time.Minute)
	got := e.costRound(n, "k", sum, 0)
	if len(got) != n {
		t.Fatalf("%d of %d simultaneous takes of %d units in all admitted with limit %d, want every one", len(got), n, sum, sum)
	}
	e.want(reqCost("k", 1), false, 0)
}

// held is an admitted decision and its units.
type held struct {
	d     edgelimit.Decision
	units int64
}

// costRound has n clients of mixed costs take slots of key at once, the
// key's live holders holding before units already, and returns the
// admitted. It checks that no more than the limit are held after the round
// and that no denial was spurious: units are only taken during a round,
// so a client denied although its units fit in what is free after it
// found them free during it too.
func (e *flightEnv) costRound(n int, key string, limit, before int64) []held {
	e.t.Helper()
	allowed, denied := e.race(n, key, mixedCost)
	after := before
	for _, h := range allowed {
		after += h.units
	}
	if after > limit {
		e.t.Fatalf("%d units held after a round of %d takes of mixed costs, limit %d", after, n, limit)
	}
	for _, u := range denied {
		if u <= limit-after {
			e.t.Fatalf("a take of %d units denied although %d were free after the round (limit %d, %d held)", u, limit-after, limit, after)
		}
	}
	if d := e.peek(reqCost(key, 1)); d.Remaining != limit-after {
		e.t.Fatalf("after the round: the store says %d free, the admissions %d", d.Remaining, limit-after)
	}
	return allowed
}

func units(hs []held) int64 {
	var u int64
	for _, h := range hs {
		u += h.units
	}
	return u
}

// testCostRounds: rounds of 64 simultaneous takes of mixed costs on one
// key, each checked by costRound: an empty key, a full one, after some
// holders were released, after every lease ended unreleased (the
// contending takes reclaim them), and after half of them did.
func (s *flightSuite) testCostRounds(t *testing.T) {
	const limit, lease = 24, time.Minute
	n := s.opts.Goroutines
	e := s.newEnv(t, limit, lease)
	release := func(hs []held) {
		var wg sync.WaitGroup
		for _, h := range hs {
			wg.Go(func() { e.finish(reqCost("k", h.units), h.d) })
		}
		wg.Wait()
	}
	hs := e.costRound(n, "k", limit, 0)
	hs = append(hs, e.costRound(n, "k", limit, units(hs))...)
	release(hs[:len(hs)/2])
	e.costRound(n, "k", limit, units(hs[len(hs)/2:]))
	// Nobody releases: every lease ends at T0+lease.
	e.clock.Set(T0.Add(lease))
	hs = e.costRound(n, "k", limit, 0)
	// Half of them released; half a lease later a round takes what is
	// free; when the rest of the old leases end, they are free too.
	release(hs[:len(hs)/2])
	e.clock.Set(T0.Add(lease + lease/2))
	fresh := e.costRound(n, "k", limit, units(hs[len(hs)/2:]))
	e.clock.Set(T0.Add(2 * lease))
	e.costRound(n, "k", limit, units(fresh))
}

// testCostChurn: clients of mixed costs take, hold and release slots as
// fast as they can; a counter raised by each admission's units and lowered
// before its release never exceeds the limit, and every slot comes back.
func (s *flightSuite) testCostChurn(t *testing.T) {
	const limit = 7
	e := s.newEnv(t, limit, time.Hour)
	var (
		holding, peak, admitted, denied atomic.Int64
		wg                              sync.WaitGroup
		start                           = make(chan struct{})
	)
	for i := range s.opts.Goroutines {
		r := reqCost("k", mixedCost(i))
		wg.Go(func() {
			<-start
			for range max(5, s.opts.Churn/4) { // a quarter of Churn's takes: on moto each is a serialised call
				d, err := e.lim.Allow(e.ctx, r)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					denied.Add(1)
					continue
				}
				admitted.Add(1)
				h := holding.Add(r.Cost)
				for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
				}
				runtime.Gosched()
				holding.Add(-r.Cost) // before the release, so a new holder never overlaps it
				if err := e.lim.Finish(e.ctx, r, d, 200, 0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Errorf("%d units held at once, limit %d", p, limit)
	}
	if admitted.Load() < 3 {
		t.Errorf("only %d takes admitted of %d", admitted.Load(), admitted.Load()+denied.Load())
	}
	t.Logf("%d admitted, %d denied, peak %d units of %d", admitted.Load(), denied.Load(), peak.Load(), limit)
	if d := e.peek(reqCost("k", 1)); d.Remaining != limit {
		t.Errorf("after every release: %d free, want %d", d.Remaining, limit)
	}
}
