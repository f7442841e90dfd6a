package limitertest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// InFlightOptions tune RunInFlight and RunInFlightEngine.
type InFlightOptions struct {
	// RetryAfter is the retry hint the limiters give when their Spec sets
	// none (strategy inflight's DefaultRetryAfter); default 1s.
	RetryAfter time.Duration
	// Goroutines is how many clients the concurrency tests run at once;
	// default Workers (64).
	Goroutines int
	// Churn is how many takes each client makes in the churn test; default
	// 20.
	Churn int
}

func (o *InFlightOptions) defaults() {
	if o.RetryAfter == 0 {
		o.RetryAfter = time.Second
	}
	if o.Goroutines == 0 {
		o.Goroutines = Workers
	}
	if o.Churn == 0 {
		o.Churn = 20
	}
}

// RunInFlight runs the conformance suite of concurrency limits (strategy
// inflight) as subtests of t: at most Limit requests of a key hold a slot,
// Window being the lease of a slot whose holder never releases it, through
// limiters that are edgelimit.Finishers (Finish releases the slot an
// admission took), Refunders (so does Refund) and Peekers. Every backend of
// the strategy runs it (the memory store, the DynamoDB store against
// dynalite and moto), so that each answers every request alike.
//
// The step tests decide at fixed instants from T0; the concurrency tests
// run Options.Goroutines clients at once against one key and check the
// strategy's two claims: at no instant do more than the limit hold a slot,
// and a take is never denied while a slot is free (every round of
// simultaneous takes admits exactly the free slots, whether they were
// released or their leases ended). A backend's NewLimiter must honour
// Spec.Now (nil: decide at Request.At) and Spec.RetryAfter; its Spec.Policy
// has no Strategy set, and a name of its own in every test, so limiters of
// one test may share a table with others.
func RunInFlight(t *testing.T, backend Backend, opts InFlightOptions) {
	t.Helper()
	opts.defaults()
	s := &flightSuite{backend: backend, opts: opts}
	t.Run("TakeRelease", s.testTakeRelease)
	t.Run("ExactRelease", s.testExactRelease)
	t.Run("DoubleRelease", s.testDoubleRelease)
	t.Run("Refund", s.testRefund)
	t.Run("Peek", s.testPeek)
	t.Run("LeaseBoundary", s.testLeaseBoundary)
	t.Run("LateReleaseAfterReclaim", s.testLateRelease)
	t.Run("RetryAfter", s.testRetryAfter)
	t.Run("Keys", s.testKeys)
	t.Run("Limits", s.testLimits)
	t.Run("LimitZero", s.testLimitZero)
	t.Run("RequestAt", s.testRequestAt)
	t.Run("ReleaseAfterCancel", s.testReleaseAfterCancel)
	t.Run("Rounds", s.testRounds)
	t.Run("Churn", s.testChurn)
	s.runCosts(t)
}

type flightSuite struct {
	backend Backend
	opts    InFlightOptions
}

// flightLimiter is what an in-flight limiter must be.
type flightLimiter interface {
	edgelimit.Limiter
	edgelimit.Finisher
	edgelimit.Refunder
	edgelimit.Peeker
}

// flightEnv is one test's limiter, backend and clock.
type flightEnv struct {
	t     *testing.T
	s     *flightSuite
	newL  NewLimiter
	clock *Clock
	lim   flightLimiter
	ctx   context.Context
}

// flightPolicies numbers the suite's policies, so that no two tests share
// items of a table.
var flightPolicies atomic.Int64

// newEnv builds a limiter of limit slots with the given lease on a fresh
// backend, at T0.
func (s *flightSuite) newEnv(t *testing.T, limit int64, lease time.Duration) *flightEnv {
	t.Helper()
	// A generous deadline for every call (a release without one has the
	// strategy's own): a real server under 64 clients may be slow, never
	// wrong.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	e := &flightEnv{t: t, s: s, newL: s.backend(t), clock: NewClock(T0), ctx: ctx}
	e.lim = e.limiter(limit, lease, e.clock.Now, 0)
	return e
}

// limiter builds another limiter on the test's backend, with a policy of
// its own.
func (e *flightEnv) limiter(limit int64, lease time.Duration, now func() time.Time, retryAfter time.Duration) flightLimiter {
	e.t.Helper()
	name := fmt.Sprintf("jobs-%d-%d", time.Now().UnixNano(), flightPolicies.Add(1))
	l, err := e.newL(Spec{
		Policy: &policy.Policy{Name: name, Limit: limit, Window: lease, Cost: 1, OnStoreError: policy.FailClosed,
			StoreTimeout: 30 * time.Second, IPv6Prefix: 64}, // not what is tested: slow is never wrong
		Now:        now,
		RetryAfter: retryAfter,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	fl, ok := l.(flightLimiter)
	if !ok {
		e.t.Fatalf("%T is not an in-flight limiter: it must be a Finisher, a Refunder and a Peeker", l)
	}
	return fl
}

func req(key string) edgelimit.Request { return edgelimit.Request{Key: key, Cost: 1} }

// allow takes a slot and checks the decision's invariants.
func (e *flightEnv) allow(r edgelimit.Request) edgelimit.Decision {
	e.t.Helper()
	d, err := e.lim.Allow(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Allow(%q): %v", r.Key, err)
	}
	if msg := checkInFlight(d, true, r.Units()); msg != "" {
		e.t.Fatalf("Allow(%q) = %+v: %s", r.Key, d, msg)
	}
	return d
}

func (e *flightEnv) want(r edgelimit.Request, allowed bool, remaining int64) edgelimit.Decision {
	e.t.Helper()
	d := e.allow(r)
	if d.Allowed != allowed || d.Remaining != remaining {
		e.t.Fatalf("at T0+%s: Allow(%q) = allowed %v, remaining %d; want allowed %v, remaining %d",
			e.clock.Now().Sub(T0), r.Key, d.Allowed, d.Remaining, allowed, remaining)
	}
	return d
}

func (e *flightEnv) finish(r edgelimit.Request, d edgelimit.Decision) {
	e.t.Helper()
	if err := e.lim.Finish(e.ctx, r, d, 200, 0); err != nil {
		e.t.Fatalf("Finish: %v", err)
	}
}

func (e *flightEnv) peek(r edgelimit.Request) edgelimit.Decision {
	e.t.Helper()
	d, err := e.lim.Peek(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Peek(%q): %v", r.Key, err)
	}
	if msg := checkInFlight(d, false, r.Units()); msg != "" {
		e.t.Fatalf("Peek(%q) = %+v: %s", r.Key, d, msg)
	}
	return d
}

// checkInFlight returns what is wrong with an in-flight decision, or "":
// the invariants the engine and draft-11 need. took says whether the
// decision came from Allow (an allowed one must carry a Receipt naming its
// slot) or from Peek (none); units are the slots the request asked for.
func checkInFlight(d edgelimit.Decision, took bool, units int64) string {
	switch {
	case d.Remaining < 0:
		return "Remaining is negative"
	case d.Remaining > d.Limit:
		return "Remaining is above the limit"
	case d.Degraded:
		return "Degraded set by a limiter (only the engine degrades)"
	case d.Reset <= 0 || d.Reset > d.Window:
		return "Reset is not within the lease"
	case d.Allowed && d.RetryAfter != 0:
		return "allowed with a RetryAfter"
	case d.Allowed && took && d.Remaining > d.Limit-units:
		return "allowed, but Remaining does not count the slots it took"
	case d.Allowed && took && d.Receipt.ID == [16]byte{}:
		return "allowed without a slot id in its Receipt"
	case d.Allowed && took && d.Receipt.Slot <= d.Receipt.At:
		return "the Receipt's lease ends before it starts"
	case (!d.Allowed || !took) && d.Receipt != edgelimit.Receipt{}:
		return "a denial or a peek carries a Receipt"
	case !d.Allowed && d.Remaining >= units && units <= d.Limit:
		return "denied although its slots are free"
	case !d.Allowed && d.RetryAfter < d.Reset:
		return "RetryAfter is before Reset"
	}
	return ""
}

func (s *flightSuite) testTakeRelease(t *testing.T) {
	e := s.newEnv(t, 2, time.Minute)
	a := e.want(req("k"), true, 1)
	b := e.want(req("k"), true, 0)
	e.want(req("k"), false, 0)
	e.want(req("k"), false, 0)
	e.finish(req("k"), a)
	c := e.want(req("k"), true, 0)
	e.want(req("k"), false, 0)
	e.finish(req("k"), b)
	e.finish(req("k"), c)
	e.want(req("k"), true, 1)
	if a.Limit != 2 || a.Window != time.Minute {
		t.Errorf("Limit, Window = %d, %s; want 2, 1m (the limit and the lease)", a.Limit, a.Window)
	}
	if a.Receipt.ID == b.Receipt.ID {
		t.Errorf("two slots with one id %x", a.Receipt.ID)
	}
	if got, want := a.Receipt.Slot, T0.Add(time.Minute).UnixNano(); got != want || a.Receipt.At != T0.UnixNano() {
		t.Errorf("Receipt = %+v; want At T0, Slot (the lease's end) %d", a.Receipt, want)
	}
}

// testExactRelease: a release gives back the slot its decision took, not
// another holder's.
func (s *flightSuite) testExactRelease(t *testing.T) {
	e := s.newEnv(t, 3, time.Minute)
	a := e.want(req("k"), true, 2)
	e.want(req("k"), true, 1)
	e.want(req("k"), true, 0)
	e.finish(req("k"), a)
	e.finish(req("k"), a) // a again: nothing of the others
	e.want(req("k"), true, 0)
	e.want(req("k"), false, 0)
	// A decision that took nothing releases nothing.
	denied := e.want(req("k"), false, 0)
	e.finish(req("k"), denied)
	e.want(req("k"), false, 0)
}

func (s *flightSuite) testDoubleRelease(t *testing.T) {
	e := s.newEnv(t, 2, time.Minute)
	a := e.want(req("k"), true, 1)
	b := e.want(req("k"), true, 0)
	for range 3 {
		e.finish(req("k"), a)
	}
	if d := e.peek(req("k")); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after releasing one of two slots three times: peek = %+v, want 1 free", d)
	}
	e.want(req("k"), true, 0)
	e.want(req("k"), false, 0)
	e.finish(req("k"), b)
	e.want(req("k"), true, 0)
}

func (s *flightSuite) testRefund(t *testing.T) {
	e := s.newEnv(t, 1, time.Minute)
	a := e.want(req("k"), true, 0)
	e.want(req("k"), false, 0)
	if err := e.lim.Refund(e.ctx, req("k"), a); err != nil {
		t.Fatal(err)
	}
	b := e.want(req("k"), true, 0)
	// A refund and then a Finish of the same decision (the engine's
	// refund_status path does both) release it once.
	if err := e.lim.Refund(e.ctx, req("k"), a); err != nil {
		t.Fatal(err)
	}
	e.want(req("k"), false, 0)
	e.finish(req("k"), b)
	e.want(req("k"), true, 0)
}

func (s *flightSuite) testPeek(t *testing.T) {
	e := s.newEnv(t, 2, time.Minute)
	if d := e.peek(req("k")); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("peek of an empty key = %+v, want allowed, 2 free", d)
	}
	for range 3 {
		e.peek(req("k")) // takes nothing
	}
	a := e.want(req("k"), true, 1)
	if d := e.peek(req("k")); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("peek with 1 of 2 held = %+v, want allowed, 1 free", d)
	}
	e.want(req("k"), true, 0)
	d := e.peek(req("k"))
	if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
		t.Fatalf("peek with 2 of 2 held = %+v, want denied, 0 free, a RetryAfter", d)
	}
	e.finish(req("k"), a)
	if d := e.peek(req("k")); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("peek after a release = %+v, want allowed, 1 free", d)
	}
}

// testLeaseBoundary: a slot whose holder never releases it (an instance
// that died mid-request) is held until its lease ends, and free from that
// instant on.
func (s *flightSuite) testLeaseBoundary(t *testing.T) {
	const lease = 10 * time.Second
	e := s.newEnv(t, 1, lease)
	e.want(req("k"), true, 0) // never released
	e.clock.Set(T0.Add(lease - time.Nanosecond))
	d := e.want(req("k"), false, 0)
	if d.RetryAfter != time.Nanosecond {
		t.Errorf("1ns before the lease ends: RetryAfter = %s, want 1ns (the lease's end is sooner than the hint)", d.RetryAfter)
	}
	if p := e.peek(req("k")); p.Allowed {
		t.Errorf("peek 1ns before the lease ends = %+v, want denied", p)
	}
	e.clock.Set(T0.Add(lease))
	if p := e.peek(req("k")); !p.Allowed || p.Remaining != 1 {
		t.Errorf("peek as the lease ends = %+v, want allowed, 1 free", p)
	}
	b := e.want(req("k"), true, 0)
	e.want(req("k"), false, 0)
	e.finish(req("k"), b)
	e.want(req("k"), true, 0)
}

// testLateRelease: the holder whose slot was reclaimed after its lease
// releases it late; that gives back nothing of the slot's new holder.
func (s *flightSuite) testLateRelease(t *testing.T) {
	const lease = 10 * time.Second
	e := s.newEnv(t, 2, lease)
	old := e.want(req("k"), true, 1)
	e.clock.Set(T0.Add(lease / 2))
	e.want(req("k"), true, 0)
	e.clock.Set(T0.Add(lease))
	e.want(req("k"), true, 0) // reclaims old's slot
	e.want(req("k"), false, 0)
	e.finish(req("k"), old)
	e.want(req("k"), false, 0)
}

func (s *flightSuite) testRetryAfter(t *testing.T) {
	e := s.newEnv(t, 1, time.Minute)
	hint := s.opts.RetryAfter
	a := e.want(req("k"), true, 0)
	if a.Reset != hint {
		t.Errorf("allowed: Reset = %s, want the retry hint %s", a.Reset, hint)
	}
	d := e.want(req("k"), false, 0)
	if d.RetryAfter != hint || d.Reset != d.RetryAfter {
		t.Errorf("denied with the lease a minute away: Reset, RetryAfter = %s, %s; want %s", d.Reset, d.RetryAfter, hint)
	}
	e.clock.Set(T0.Add(time.Minute - 300*time.Millisecond))
	d = e.want(req("k"), false, 0)
	if d.RetryAfter != 300*time.Millisecond || d.Reset != d.RetryAfter {
		t.Errorf("denied 300ms before the lease ends: Reset, RetryAfter = %s, %s; want 300ms", d.Reset, d.RetryAfter)
	}
	// A configured hint.
	l := e.limiter(1, time.Minute, e.clock.Now, 5*time.Second)
	e.clock.Set(T0)
	if _, err := l.Allow(e.ctx, req("k")); err != nil {
		t.Fatal(err)
	}
	d, err := l.Allow(e.ctx, req("k"))
	if err != nil || d.Allowed || d.RetryAfter != 5*time.Second {
		t.Errorf("with retry_after 5s: %+v, %v; want denied, RetryAfter 5s", d, err)
	}
}

func (s *flightSuite) testKeys(t *testing.T) {
	e := s.newEnv(t, 1, time.Minute)
	a := e.want(req("a"), true, 0)
	e.want(req("b"), true, 0)
	e.want(req("a"), false, 0)
	e.finish(req("b"), a) // a's receipt under b's key: not b's slot
	e.want(req("b"), false, 0)
	e.finish(req("a"), a)
	e.want(req("a"), true, 0)
	// Another policy on the same store: its own slots.
	other := e.limiter(1, time.Minute, e.clock.Now, 0)
	if d, err := other.Allow(e.ctx, req("a")); err != nil || !d.Allowed {
		t.Fatalf("another policy, same key: %+v, %v; want allowed", d, err)
	}
}

// testLimits: a tier's or an override's limit and lease (Request.Limits)
// replace the policy's.
func (s *flightSuite) testLimits(t *testing.T) {
	e := s.newEnv(t, 1, time.Minute)
	r := req("k")
	r.Limits = policy.Limits{Limit: 3, Window: 2 * time.Minute}
	d := e.want(r, true, 2)
	if d.Limit != 3 || d.Window != 2*time.Minute || d.Receipt.Slot != T0.Add(2*time.Minute).UnixNano() {
		t.Errorf("with limits 3 per 2m: %+v", d)
	}
	e.want(r, true, 1)
	e.want(r, true, 0)
	e.want(r, false, 0)
	e.want(req("k"), false, 0) // the policy's limit of 1: 3 are held
	e.clock.Set(T0.Add(time.Minute))
	e.want(r, false, 0) // the 2m leases hold
	e.clock.Set(T0.Add(2 * time.Minute))
	e.want(r, true, 2)
}

func (s *flightSuite) testLimitZero(t *testing.T) {
	e := s.newEnv(t, 0, time.Minute)
	for range 2 {
		e.want(req("k"), false, 0)
	}
	if d := e.peek(req("k")); d.Allowed {
		t.Errorf("peek with limit 0 = %+v", d)
	}
}

// testRequestAt: without a clock of its own, the limiter decides at the
// request's instant.
func (s *flightSuite) testRequestAt(t *testing.T) {
	e := s.newEnv(t, 1, 10*time.Second)
	e.lim = e.limiter(1, 10*time.Second, nil, 0)
	r := req("k")
	r.At = T0
	d := e.want(r, true, 0)
	if d.Receipt.At != T0.UnixNano() {
		t.Errorf("Receipt.At = %d, want T0 %d", d.Receipt.At, T0.UnixNano())
	}
	r.At = T0.Add(10*time.Second - time.Nanosecond)
	e.want(r, false, 0)
	r.At = T0.Add(10 * time.Second)
	e.want(r, true, 0)
}

// testReleaseAfterCancel: a release whose context was cancelled (the
// client went away mid-request) still gives the slot back.
func (s *flightSuite) testReleaseAfterCancel(t *testing.T) {
	e := s.newEnv(t, 1, time.Minute)
	a := e.want(req("k"), true, 0)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if err := e.lim.Finish(ctx, req("k"), a, 499, 0); err != nil {
		t.Fatalf("Finish with a cancelled context: %v", err)
	}
	e.want(req("k"), true, 0)
}

// round has n clients take a slot of key at once and returns the allowed
// decisions, checking every decision and that the denials are real.
func (e *flightEnv) round(n int, key string) []edgelimit.Decision {
	e.t.Helper()
	allowed, _ := e.race(n, key, func(int) int64 { return 1 })
	out := make([]edgelimit.Decision, len(allowed))
	for i, h := range allowed {
		out[i] = h.d
	}
	return out
}

// race has n clients, client i taking units(i) slots, take slots of key at
// once, checks every decision, and returns the admitted and the units of
// the denied.
func (e *flightEnv) race(n int, key string, units func(i int) int64) (allowed []held, denied []int64) {
	e.t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		start = make(chan struct{})
	)
	for i := range n {
		u := units(i)
		wg.Go(func() {
			<-start
			d, err := e.lim.Allow(e.ctx, reqCost(key, u))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case checkInFlight(d, true, u) != "":
				errs = append(errs, fmt.Errorf("%+v: %s", d, checkInFlight(d, true, u)))
			case d.Allowed:
				allowed = append(allowed, held{d, u})
			default:
				denied = append(denied, u)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		e.t.Error(err)
	}
	if len(errs) > 0 {
		e.t.FailNow()
	}
	return allowed, denied
}

// testRounds: rounds of simultaneous takes, each of which must admit
// exactly the slots that are free: none released, some released, all
// released, all expired (reclaimed by contending clients), and half
// expired.
func (s *flightSuite) testRounds(t *testing.T) {
	const limit, lease = 8, time.Minute
	n := s.opts.Goroutines
	e := s.newEnv(t, limit, lease)
	expect := func(what string, got []edgelimit.Decision, want int) {
		t.Helper()
		if len(got) != want {
			t.Fatalf("%s: %d of %d simultaneous takes admitted, want exactly %d", what, len(got), n, want)
		}
		seen := map[[16]byte]bool{}
		for _, d := range got {
			if seen[d.Receipt.ID] {
				t.Fatalf("%s: two admissions with one slot id", what)
			}
			seen[d.Receipt.ID] = true
		}
	}
	release := func(ds []edgelimit.Decision) {
		var wg sync.WaitGroup
		for _, d := range ds {
			wg.Go(func() { e.finish(req("k"), d) })
		}
		wg.Wait()
	}
	held := e.round(n, "k")
	expect("empty key", held, limit)
	expect("all slots held", e.round(n, "k"), 0)
	release(held[:3])
	again := e.round(n, "k")
	expect("3 released", again, 3)
	held = append(held[3:], again...)
	release(held)
	held = e.round(n, "k")
	expect("all released", held, limit)
	// Nobody releases: every lease ends at T0+lease.
	e.clock.Set(T0.Add(lease))
	held = e.round(n, "k")
	expect("all leases ended", held, limit)
	// Half of them released; half taken anew half a lease later; when the
	// rest of the old leases end, exactly that half is free.
	release(held[:limit/2])
	e.clock.Set(T0.Add(lease + lease/2))
	fresh := e.round(n, "k")
	expect("half released", fresh, limit/2)
	e.clock.Set(T0.Add(2 * lease))
	expect("half the leases ended", e.round(n, "k"), limit/2)
}

// testChurn: clients take, hold and release slots as fast as they can; a
// counter incremented between each admission and its release never exceeds
// the limit.
func (s *flightSuite) testChurn(t *testing.T) {
	const limit = 5
	e := s.newEnv(t, limit, time.Hour)
	var (
		holding, peak, admitted, denied atomic.Int64
		wg                              sync.WaitGroup
		start                           = make(chan struct{})
	)
	for range s.opts.Goroutines {
		wg.Go(func() {
			<-start
			for range s.opts.Churn {
				d, err := e.lim.Allow(e.ctx, req("k"))
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					denied.Add(1)
					continue
				}
				admitted.Add(1)
				h := holding.Add(1)
				for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
				}
				runtime.Gosched()
				holding.Add(-1) // before the release, so a new holder never overlaps it
				if err := e.lim.Finish(e.ctx, req("k"), d, 200, 0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Errorf("%d requests held a slot at once, limit %d", p, limit)
	}
	if admitted.Load() < limit {
		t.Errorf("only %d takes admitted of %d", admitted.Load(), admitted.Load()+denied.Load())
	}
	t.Logf("%d admitted, %d denied, peak %d of %d", admitted.Load(), denied.Load(), peak.Load(), limit)
	// Every slot came back.
	if d := e.peek(req("k")); d.Remaining != limit {
		t.Errorf("after every release: %d free, want %d", d.Remaining, limit)
	}
}
