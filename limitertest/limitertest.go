// Package limitertest is the conformance suite every exact edgelimit
// backend runs: the same step tables, boundary cases, refunds, atomic
// batches and concurrency claims, against the in-memory store and against
// real DynamoDB-API servers alike.
//
//	func TestConformance(t *testing.T) {
//		limitertest.Run(t, func(t *testing.T) limitertest.NewLimiter {
//			store := durablecounter.NewMemoryStore(durablecounter.MemoryConfig{})
//			return func(p *edgelimit.Policy, now func() time.Time) (edgelimit.Limiter, error) {
//				return durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: now})
//			}
//		}, limitertest.Options{Batch: true, Refund: true, Concurrency: true})
//	}
//
// Time comes from an injected Clock starting at T0; the suite never sleeps.
// Windows are aligned to the Unix epoch (see WindowStart), which is what lets
// instances that share a store agree on them.
//
// What the suite holds a backend to, beyond each test's expectations, is
// checked on every decision (see checkDecision): Limit and Window are the
// policy's, 0 <= Remaining <= Limit, an allowed decision has RetryAfter 0
// and Remaining <= Limit-cost, a denied one has RetryAfter > 0 and
// Remaining < cost, and 0 < RetryAfter <= Reset.
package limitertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// T0 is the instant every test starts at.
var T0 = time.Unix(1_700_000_000, 0)

// NewLimiter builds a limiter for policy p that reads time from now.
type NewLimiter func(p *edgelimit.Policy, now func() time.Time) (edgelimit.Limiter, error)

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
	// Concurrency runs the concurrency claims: 64 goroutines against one
	// key and against 1,000 keys, about 8,600 decisions in all. Skipped
	// with -short.
	Concurrency bool
}

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, backend Backend, opts Options) {
	t.Helper()
	if opts.Algorithm == "" {
		opts.Algorithm = edgelimit.AlgorithmFixedWindow
	}
	s := &suite{backend: backend, opts: opts}
	switch opts.Algorithm {
	case edgelimit.AlgorithmFixedWindow:
		t.Run("FixedWindow/Steps", s.testFixedWindowSteps)
		t.Run("FixedWindow/BoundaryBurst", s.testFixedWindowBoundaryBurst)
		t.Run("FixedWindow/Model", s.testFixedWindowModel)
	default:
		t.Errorf("limitertest: no step tables for algorithm %q; the common tests still run", opts.Algorithm)
	}
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
		t.Run("NoSpuriousDenials", s.testConcurrentNoSpuriousDenials)
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
		opts.Algorithm = edgelimit.AlgorithmFixedWindow
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

// policy returns a complete durable policy as ParsePolicies would.
func (s *suite) policy(name string, limit int64, window time.Duration) *edgelimit.Policy {
	return &edgelimit.Policy{
		Name:         name,
		Strategy:     edgelimit.StrategyDurable,
		Algorithm:    s.opts.Algorithm,
		Limit:        limit,
		Window:       window,
		Burst:        limit,
		Cost:         1,
		OnStoreError: edgelimit.FailClosed,
		StoreTimeout: edgelimit.DefaultStoreTimeout,
		Shards:       1,
		DenyCache:    false,
		IPv6Prefix:   64,
	}
}

// lim is a limiter under test with its policy.
type lim struct {
	e *env
	p *edgelimit.Policy
	l edgelimit.Limiter
}

func (e *env) limiter(name string, limit int64, window time.Duration) *lim {
	e.t.Helper()
	p := e.s.policy(name, limit, window)
	l, err := e.newL(p, e.clock.Now)
	if err != nil {
		e.t.Fatalf("new limiter for %q (limit %d, window %s): %v", name, limit, window, err)
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
	return d
}

func (l *lim) refund(key string, cost int64) {
	l.e.t.Helper()
	r, ok := l.l.(edgelimit.Refunder)
	if !ok {
		l.e.t.Fatalf("%T claims Refund but is not an edgelimit.Refunder", l.l)
	}
	if err := r.Refund(l.e.ctx(), edgelimit.Request{Key: key, Cost: cost}); err != nil {
		l.e.t.Fatalf("%s.Refund(%q, %d): %v", l.p.Name, key, cost, err)
	}
}

// at renders the clock relative to T0 for messages.
func (e *env) at() string { return "T0+" + e.clock.Now().Sub(T0).String() }

// checkDecision returns what is wrong with d, a decision of p for a request
// of cost units, or "".
func checkDecision(p *edgelimit.Policy, cost int64, d edgelimit.Decision) string {
	switch {
	case d.Policy != "" && d.Policy != p.Name:
		return "Policy is not the policy's name " + p.Name
	case d.Limit != p.Limit:
		return "Limit is not the policy's limit"
	case d.Window != p.Window:
		return "Window is not the policy's window"
	case d.Remaining < 0:
		return "Remaining is negative"
	case d.Remaining > p.Limit:
		return "Remaining is above the limit"
	case d.Degraded:
		return "Degraded set by a limiter (only the engine degrades)"
	case d.Reset <= 0:
		return "Reset is not positive"
	case d.Allowed && d.RetryAfter != 0:
		return "allowed with a RetryAfter"
	case d.Allowed && d.Remaining > p.Limit-cost:
		return "allowed, but Remaining does not account for the cost"
	case !d.Allowed && d.RetryAfter <= 0:
		return "denied without a RetryAfter"
	case !d.Allowed && d.Remaining >= cost:
		return "denied although Remaining covers the cost"
	case d.RetryAfter > d.Reset:
		return "RetryAfter is after Reset"
	case p.Algorithm == edgelimit.AlgorithmFixedWindow && d.Reset > p.Window:
		return "Reset is beyond the window"
	}
	return ""
}
