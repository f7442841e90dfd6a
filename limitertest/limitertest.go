// Package limitertest is the conformance suite every exact edgelimit
// backend runs: the same step tables, boundary cases, refunds, atomic
// batches and concurrency claims, against the in-memory store and against
// real DynamoDB-API servers alike, for each algorithm of strategy durable,
// and for strategy kv's token bucket on one instance (a soft limiter is
// exact for one instance: what the suite holds it to; what several
// instances admit is kv's own bound, tested in kvbucket). Concurrency
// limits (strategy inflight) have a suite of their own, RunInFlight, and
// RunInFlightEngine through the engine and an adapter. The package knows
// only the contract (the root package and policy), no strategy: each
// strategy's tests run it on each of their stores.
//
//	func TestConformance(t *testing.T) {
//		limitertest.Run(t, func(t *testing.T) limitertest.NewLimiter {
//			store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
//			return func(s limitertest.Spec) (edgelimit.Limiter, error) {
//				return durablecounter.New(durablecounter.Config{Policy: s.Policy, Store: store, Now: s.Now,
//					Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(s.Algorithm), Burst: s.Burst, DenyCache: s.DenyCache}})
//			}
//		}, limitertest.Options{Algorithm: limitertest.GCRA, Batch: true, Refund: true, Peek: true, Concurrency: true})
//	}
//
// Time comes from an injected Clock starting at T0; the suite never sleeps.
// Windows are aligned to the Unix epoch (see WindowStart), which is what lets
// instances that share a store agree on them.
//
// # The algorithms
//
// Each has a reference model (model.go), the simplest code that computes
// every field, which the randomised test compares the backend with step by
// step; the step tables pin the same rules by hand. With t the decision
// time, c the cost (0 means 1), L the limit and W the window:
//
//   - fixed-window: at most L units in [k*W, (k+1)*W). Remaining = L - n;
//     Reset = the window's end; a denial's RetryAfter = Reset.
//   - sliding-window: with i the window of t (or the newest window counted,
//     if later) and f the fraction of it passed, admitted if
//     count(i) + c + ceil(count(i-1) * (1 - f)) <= L. Remaining = L minus
//     that estimate; Reset = the first instant the estimate has fallen by
//     one unit (the end of window i when it is 0); RetryAfter = the first
//     instant the request would fit.
//   - sliding-log: admitted if the units admitted at milliseconds in
//     (t - W, t] (stamps after t count too) plus c are at most L.
//     Remaining = L minus them; Reset = when the oldest of them leaves the
//     window (W if none); RetryAfter = when enough of the oldest have left.
//   - gcra: with T = ceil(W/L) and capacity B (Spec.Burst, default L),
//     admitted if max(TAT, t) + c*T - t <= B*T, then TAT = max(TAT, t) + c*T.
//     Remaining = floor((t + B*T - max(TAT, t)) / T); Reset = until the next
//     unit comes back (one interval T for a full bucket); RetryAfter =
//     max(TAT, t) - t - (B-c)*T.
//   - token-bucket (strategy kv, one instance): gcra's bucket at the exact
//     rate L/W: the bucket at t holds a = min(B, B - (TAT - t)*L/W) tokens
//     (TAT in exact units, not rounded to a nanosecond per unit), a request
//     is admitted if a >= c, then TAT = max(TAT, t) + c*W/L. Remaining =
//     floor(a); Reset = until a reaches floor(a) + 1 (ceil(W/L) for a full
//     bucket); RetryAfter = until a reaches c. t is the request's own
//     instant.
//
// Reset is draft-ietf-httpapi-ratelimit-headers-11's effective window t:
// the time within which the client can use no more than Remaining. A
// denial's RetryAfter is never shorter (until the request's cost fits,
// never sooner than one unit). Limit and Window are what the client is
// told (Quota): the policy's, and for gcra with a burst other than the
// limit, the burst over the time the bucket takes to fill.
//
// t above is the instant the request is decided at: its own, or the latest
// instant a request of the key was decided at, if that is later (a request
// whose clock is a little behind the item's last writer is decided as if at
// that instant, and so is never denied by the gap).
//
// A denial spends nothing; a cost above L (gcra: B) never fits and is denied
// with RetryAfter = W, or Reset if that is longer (the fixed window:
// RetryAfter = Reset). An allowed decision carries a Receipt, and a
// refund of it (Refunder.Refund with that decision) undoes exactly what it
// spent, as of the later of the refund's instant and the decision's, never
// below zero: in the decision's window (fixed window: nothing once that
// window has ended; sliding window: that window's count, while it weighs),
// from the millisecond its units were stamped with (sliding log, while it
// is in the window), by removing what is still to come of its slot of
// the emission schedule (gcra: all of it as of the decision's instant),
// or (token-bucket) by giving back what of its units refill has not
// brought back since it was spent: c units spent at s, refunded at r, give
// back c - (r - s)*L/W, never less than nothing, never beyond a full
// bucket (a spend's effect on a bucket decays at most at the refill rate,
// so this never gives back more than the spend took; at the spend's own
// instant it gives back all of it).
// A decision without a Receipt spent nothing and refunds nothing. A peek
// (edgelimit.Peeker) reports what a request would get, allowed with the
// quota left without it or the denial, and spends nothing.
//
// What the suite holds a backend to, beyond each test's expectations, is
// checked on every decision (see checkDecision): Limit and Window are the
// policy's Quota, 0 <= Remaining <= Limit, an allowed decision has
// RetryAfter 0 and Remaining <= capacity-cost, a denied one has
// RetryAfter >= Reset and Remaining < cost, Reset > 0 and within the
// window (two for the sliding window, one interval for a bucket), and allowed
// decisions of Allow carry a Receipt, denials and peeks none.
package limitertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// T0 is the instant every test starts at.
var T0 = time.Unix(1_700_000_000, 0)

// The algorithms the suite has reference models and step tables for.
const (
	FixedWindow   = "fixed-window"
	SlidingWindow = "sliding-window"
	SlidingLog    = "sliding-log"
	GCRA          = "gcra"
	// TokenBucket is strategy kv's algorithm: gcra's bucket with the exact
	// rate (no emission interval rounded to a nanosecond) and a refund that
	// gives back what of a spend has not come back by refill (see the
	// package documentation). A soft backend claims it for one instance:
	// what the suite checks is one instance's exactness.
	TokenBucket = "token-bucket"
)

// Spec is a policy under test: the fields every policy has, and what the
// backend must implement for it.
type Spec struct {
	*policy.Policy
	// Algorithm is one of FixedWindow, SlidingWindow, SlidingLog, GCRA and
	// TokenBucket.
	Algorithm string
	// Burst is a bucket's capacity (gcra, token-bucket); 0 means the limit.
	Burst int64
	// DenyCache: turn on the backend's deny cache, which must change no
	// decision.
	DenyCache bool
	// Now is the limiter's clock.
	Now func() time.Time
	// RetryAfter is a concurrency limit's retry hint (RunInFlight: what a
	// denied client is told to wait, unless a lease ends sooner; the policy
	// field retry_after); 0 means the limiter's default.
	RetryAfter time.Duration
}

// NewLimiter builds a limiter for s.
type NewLimiter func(s Spec) (edgelimit.Limiter, error)

// Backend prepares fresh, empty state for one test (a new memory store, a
// new table) and returns how to build limiters on it. Limiters built by one
// NewLimiter share that state, so a backend that supports batches can batch
// them. Cleanups belong in t.Cleanup.
type Backend func(t *testing.T) NewLimiter

// Options say what a backend claims, and so which tests it runs.
type Options struct {
	// Algorithm is the algorithm the limiters implement, put into every
	// Policy; default fixed-window. It selects the algorithm's step tables
	// and reference model.
	Algorithm string
	// Batch: the limiters are edgelimit.BatchLimiters whose AllowBatch is
	// all or nothing. Without it the batch tests are skipped.
	Batch bool
	// Refund: the limiters are edgelimit.Refunders. Without it the refund
	// tests are skipped.
	Refund bool
	// Peek: the limiters are edgelimit.Peekers. Without it the peek tests
	// are skipped.
	Peek bool
	// Concurrency runs the concurrency claims: 64 goroutines against one
	// key (4,000 requests, limit 1,000) and against 1,000 keys, and 300
	// concurrent batches. Skipped with -short.
	Concurrency bool
	// DenyCache turns on every policy's deny cache (Spec.DenyCache), so
	// the suite shows that the cache never changes a decision.
	DenyCache bool
	// Quick is for slow servers: it shortens the randomised comparison
	// with the reference model from 300 steps to 60, runs the 1,000-key
	// claim with a limit of 1 (2 requests a key) instead of 2 (3 a key),
	// and the concurrent batches at half size. The one-key claim (64
	// goroutines, 4,000 requests, limit 1,000) and every other test run in
	// full.
	Quick bool
	// Serialized is for a server that answers one call at a time (moto
	// behind the test-server runner's lock): there the concurrency claims'
	// interleavings are the client's alone (64 goroutines reading, deciding
	// and writing around one another), which do not grow with the
	// claims' sizes, while their time does, call by call. The one-key claim
	// runs at a quarter (64 goroutines, 1,000 requests, limit 250: every
	// unit still contended by 64), the distinct-keys claim with 250 keys
	// (each key's requests are more than 64 apart either way, so no two of
	// one key meet at any size). A server that answers concurrently runs
	// them in full.
	Serialized bool
}

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, backend Backend, opts Options) {
	t.Helper()
	if opts.Algorithm == "" {
		opts.Algorithm = FixedWindow
	}
	s := &suite{backend: backend, opts: opts}
	switch opts.Algorithm {
	case FixedWindow:
		t.Run("FixedWindow/Steps", s.testFixedWindowSteps)
		t.Run("FixedWindow/BoundaryBurst", s.testFixedWindowBoundaryBurst)
	case SlidingWindow:
		t.Run("SlidingWindow/Steps", s.testSlidingWindowSteps)
		t.Run("SlidingWindow/NoBoundaryBurst", s.testNoBoundaryBurst)
	case SlidingLog:
		t.Run("SlidingLog/Steps", s.testSlidingLogSteps)
		t.Run("SlidingLog/NoBoundaryBurst", s.testNoBoundaryBurst)
	case GCRA, TokenBucket:
		// The step tables' rates divide a nanosecond: both algorithms
		// answer them alike.
		t.Run("GCRA/Steps", s.testGCRASteps)
		t.Run("GCRA/Burst", s.testGCRABurst)
		t.Run("GCRA/NoBoundaryBurst", s.testNoBoundaryBurst)
	default:
		t.Errorf("limitertest: no step tables for algorithm %q; the common tests still run", opts.Algorithm)
	}
	t.Run("Model", s.testModel)
	t.Run("CostAboveRemaining", s.testCostAboveRemaining)
	t.Run("CostAboveLimit", s.testCostAboveLimit)
	t.Run("LimitZero", s.testLimitZero)
	t.Run("DefaultCost", s.testDefaultCost)
	t.Run("RemainingNeverNegative", s.testRemainingNeverNegative)
	t.Run("KeysIndependent", s.testKeysIndependent)
	t.Run("PoliciesIndependent", s.testPoliciesIndependent)
	t.Run("Refund", func(t *testing.T) {
		if !opts.Refund {
			t.Skip("backend does not claim Refund")
		}
		t.Run("GivesBack", s.testRefundGivesBack)
		t.Run("NeverCreatesQuota", s.testRefundNeverCreatesQuota)
		t.Run("ByReceipt", s.testRefundByReceipt)
		t.Run("Batch", func(t *testing.T) {
			if !opts.Batch {
				t.Skip("backend does not claim Batch")
			}
			s.testRefundBatch(t)
		})
	})
	t.Run("Peek", func(t *testing.T) {
		if !opts.Peek {
			t.Skip("backend does not claim Peek")
		}
		t.Run("SpendsNothing", s.testPeekSpendsNothing)
		t.Run("ReportsDenial", s.testPeekReportsDenial)
	})
	t.Run("Batch", func(t *testing.T) {
		if !opts.Batch {
			t.Skip("backend does not claim Batch")
		}
		s.runBatch(t)
	})
	t.Run("Concurrency", func(t *testing.T) {
		if !opts.Concurrency {
			t.Skip("backend does not claim Concurrency")
		}
		if testing.Short() {
			t.Skip("-short")
		}
		t.Run("OneKeyExact", s.testConcurrentOneKey)
		t.Run("DistinctKeys", s.testConcurrentDistinctKeys)
		t.Run("Batch", func(t *testing.T) {
			if !opts.Batch {
				t.Skip("backend does not claim Batch")
			}
			s.testConcurrentBatch(t)
		})
	})
}

// RunBatch runs only the batch tests (including the concurrent one when
// opts.Concurrency is set), for a backend with a second batch protocol to
// show all or nothing too.
func RunBatch(t *testing.T, backend Backend, opts Options) {
	t.Helper()
	if opts.Algorithm == "" {
		opts.Algorithm = FixedWindow
	}
	s := &suite{backend: backend, opts: opts}
	s.runBatch(t)
	if opts.Concurrency && !testing.Short() {
		t.Run("Concurrent", s.testConcurrentBatch)
	}
}

func (s *suite) runBatch(t *testing.T) {
	t.Run("AllOrNothing", s.testBatchAllOrNothing)
	t.Run("NamesEveryViolation", s.testBatchNamesEveryViolation)
	t.Run("CostAboveRemaining", s.testBatchCostAboveRemaining)
	t.Run("Single", s.testBatchSingle)
}

// Clock is a settable clock for tests, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// WindowStart returns the start of the fixed window of length w that
// contains t. Windows are aligned to the Unix epoch: [k*w, (k+1)*w).
func WindowStart(t time.Time, w time.Duration) time.Time {
	ns, wn := t.UnixNano(), int64(w)
	q := ns / wn
	if ns%wn < 0 {
		q--
	}
	return time.Unix(0, q*wn)
}

type suite struct {
	backend Backend
	opts    Options
}

// env is one test's state: a fresh backend and a clock at T0.
type env struct {
	t     *testing.T
	s     *suite
	clock *Clock
	newL  NewLimiter
}

func (s *suite) env(t *testing.T) *env {
	t.Helper()
	return &env{t: t, s: s, clock: NewClock(T0), newL: s.backend(t)}
}

// policy returns a complete policy as policy.Parse would, with the
// suite's algorithm.
func (s *suite) policy(name string, limit int64, window time.Duration) *Spec {
	return &Spec{
		Policy: &policy.Policy{
			Name:         name,
			Limit:        limit,
			Window:       window,
			Cost:         1,
			OnStoreError: policy.FailClosed,
			StoreTimeout: 30 * time.Second, // the budget is not what the kit tests: a loaded machine may make a call slow, never wrong
			IPv6Prefix:   64,
		},
		Algorithm: s.opts.Algorithm,
		Burst:     limit,
		DenyCache: s.opts.DenyCache,
	}
}

// lim is a limiter under test with its policy.
type lim struct {
	e *env
	p *Spec
	l edgelimit.Limiter
}

func (e *env) limiter(name string, limit int64, window time.Duration) *lim {
	e.t.Helper()
	return e.limiterFor(e.s.policy(name, limit, window))
}

// limiterBurst is a limiter whose policy has a gcra burst.
func (e *env) limiterBurst(name string, limit int64, window time.Duration, burst int64) *lim {
	e.t.Helper()
	p := e.s.policy(name, limit, window)
	p.Burst = burst
	return e.limiterFor(p)
}

func (e *env) limiterFor(p *Spec) *lim {
	e.t.Helper()
	p.Now = e.clock.Now
	l, err := e.newL(*p)
	if err != nil {
		e.t.Fatalf("new limiter for %q (limit %d, window %s): %v", p.Name, p.Limit, p.Window, err)
	}
	return &lim{e: e, p: p, l: l}
}

func (e *env) ctx() context.Context { return e.t.Context() }

// allow asks l and checks the decision's invariants; a store error is fatal.
func (l *lim) allow(key string, cost int64) edgelimit.Decision {
	l.e.t.Helper()
	req := edgelimit.Request{Key: key, Cost: cost}
	d, err := l.l.Allow(l.e.ctx(), req)
	if err != nil {
		l.e.t.Fatalf("%s.Allow(%q, %d) at %s: %v", l.p.Name, key, cost, l.e.at(), err)
	}
	if msg := checkDecision(l.p, req.Units(), d); msg != "" {
		l.e.t.Errorf("%s.Allow(%q, %d) at %s = %+v: %s", l.p.Name, key, cost, l.e.at(), d, msg)
	}
	if msg := checkReceipt(d, true); msg != "" {
		l.e.t.Errorf("%s.Allow(%q, %d) at %s = %+v: %s", l.p.Name, key, cost, l.e.at(), d, msg)
	}
	return d
}

// refund gives back what d, l's decision for a request of cost, spent.
func (l *lim) refund(key string, cost int64, d edgelimit.Decision) {
	l.e.t.Helper()
	r, ok := l.l.(edgelimit.Refunder)
	if !ok {
		l.e.t.Fatalf("%T claims Refund but is not an edgelimit.Refunder", l.l)
	}
	if err := r.Refund(l.e.ctx(), edgelimit.Request{Key: key, Cost: cost}, d); err != nil {
		l.e.t.Fatalf("%s.Refund(%q, %d) at %s: %v", l.p.Name, key, cost, l.e.at(), err)
	}
}

// peek asks l what a request would get and checks the decision's
// invariants; a store error is fatal.
func (l *lim) peek(key string, cost int64) edgelimit.Decision {
	l.e.t.Helper()
	pe, ok := l.l.(edgelimit.Peeker)
	if !ok {
		l.e.t.Fatalf("%T claims Peek but is not an edgelimit.Peeker", l.l)
	}
	req := edgelimit.Request{Key: key, Cost: cost}
	d, err := pe.Peek(l.e.ctx(), req)
	if err != nil {
		l.e.t.Fatalf("%s.Peek(%q, %d) at %s: %v", l.p.Name, key, cost, l.e.at(), err)
	}
	if msg := checkDecision(l.p, req.Units(), d); msg != "" {
		l.e.t.Errorf("%s.Peek(%q, %d) at %s = %+v: %s", l.p.Name, key, cost, l.e.at(), d, msg)
	}
	if msg := checkReceipt(d, false); msg != "" {
		l.e.t.Errorf("%s.Peek(%q, %d) at %s = %+v: %s", l.p.Name, key, cost, l.e.at(), d, msg)
	}
	return d
}

// at renders the clock relative to T0 for messages.
func (e *env) at() string { return "T0+" + e.clock.Now().Sub(T0).String() }

// checkDecision returns what is wrong with d, a decision of p for a request
// of cost units, or "".
func checkDecision(p *Spec, cost int64, d edgelimit.Decision) string {
	capacity := Capacity(p)
	q, w := Quota(p)
	switch {
	case d.Policy != "" && d.Policy != p.Name:
		return "Policy is not the policy's name " + p.Name
	case d.Limit != q:
		return "Limit is not the policy's quota (q)"
	case d.Window != w:
		return "Window is not the policy's quota window (w)"
	case d.Remaining < 0:
		return "Remaining is negative"
	case d.Remaining > capacity:
		return "Remaining is above the limit (the burst, for gcra)"
	case d.Degraded:
		return "Degraded set by a limiter (only the engine degrades)"
	case d.Reset <= 0:
		return "Reset (the effective window) is not positive"
	case d.Allowed && d.RetryAfter != 0:
		return "allowed with a RetryAfter"
	case d.Allowed && d.Remaining > capacity-cost && d.Receipt.At != 0:
		return "allowed, but Remaining does not account for the cost"
	case !d.Allowed && d.RetryAfter <= 0:
		return "denied without a RetryAfter"
	case !d.Allowed && d.Remaining >= cost:
		return "denied although Remaining covers the cost"
	case !d.Allowed && d.RetryAfter < d.Reset:
		return "RetryAfter is before Reset (a request fits before one unit does)"
	case p.Algorithm == FixedWindow && d.Reset > p.Window:
		return "Reset is beyond the window"
	case p.Algorithm == SlidingWindow && d.Reset > 2*p.Window:
		return "Reset is beyond two windows"
	case p.Algorithm == SlidingLog && d.Reset > p.Window:
		return "Reset is beyond the window"
	case bucket(p.Algorithm) && p.Limit > 0 && d.Reset > interval(p):
		return "Reset is beyond one emission interval"
	}
	return ""
}

// checkReceipt returns what is wrong with d's Receipt: an allowed decision
// of Allow (spent) must carry one, a denial or a peek none.
func checkReceipt(d edgelimit.Decision, spends bool) string {
	switch {
	case spends && d.Allowed && d.Receipt.At == 0:
		return "allowed without a Receipt (Refund could not undo it)"
	case (!spends || !d.Allowed) && d.Receipt != (edgelimit.Receipt{}):
		return "a Receipt on a decision that spent nothing"
	}
	return ""
}
