// Package storetest is the conformance suite of inflight.Store: every store
// (the MemoryStore, the DynamoDB store against dynalite and moto) runs the
// same tests, through an inflight.Limiter with an injected clock, so that
// both answer every request alike.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) inflight.Store {
//			s, _ := inflight.NewMemoryStore(inflight.MemoryConfig{})
//			return s
//		}, storetest.Options{})
//	}
//
// The step tests decide at fixed instants from T0; the concurrency tests
// run Options.Goroutines goroutines (64 by default) at once against one key
// and check the two claims of the package: at no instant do more than the
// limit hold a slot, and a take is never denied while a slot is free (every
// round of simultaneous takes admits exactly the free slots, whether they
// were released or their leases ended).
package storetest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// T0 is the instant every test starts at.
var T0 = time.Unix(1_700_000_000, 0)

// NewStore returns a fresh store for one test. Stores of one test may share
// a backend (a table), but not items: the suite uses a policy name of its
// own in every test.
type NewStore func(t *testing.T) inflight.Store

// Options tune Run.
type Options struct {
	// Goroutines is how many clients the concurrency tests run at once;
	// default 64.
	Goroutines int
	// Churn is how many takes each client makes in the churn test; default
	// 20.
	Churn int
}

// Run runs the suite.
func Run(t *testing.T, newStore NewStore, opts Options) {
	if opts.Goroutines == 0 {
		opts.Goroutines = 64
	}
	if opts.Churn == 0 {
		opts.Churn = 20
	}
	s := &suite{newStore: newStore, opts: opts}
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
	t.Run("Rounds", s.testRounds)
	t.Run("Churn", s.testChurn)
}

type suite struct {
	newStore NewStore
	opts     Options
}

// env is one test's limiter, store and clock.
type env struct {
	t     *testing.T
	store inflight.Store
	clock *limitertest.Clock
	lim   *inflight.Limiter
	ctx   context.Context
}

var policies atomic.Int64

// newEnv builds a limiter of limit slots with the given lease on a fresh
// store, at T0.
func (s *suite) newEnv(t *testing.T, limit int64, lease time.Duration) *env {
	t.Helper()
	// A generous deadline for every call (a release without one has
	// inflight.ReleaseTimeout): a real server under 64 clients may be slow,
	// never wrong.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, store: s.newStore(t), clock: limitertest.NewClock(T0), ctx: ctx}
	e.lim = e.limiter(limit, lease, e.clock.Now)
	return e
}

func (e *env) limiter(limit int64, lease time.Duration, now func() time.Time) *inflight.Limiter {
	e.t.Helper()
	name := fmt.Sprintf("jobs-%d-%d", time.Now().UnixNano(), policies.Add(1))
	l, err := inflight.New(inflight.Config{
		Policy: &policy.Policy{Name: name, Strategy: inflight.Strategy, Limit: limit, Window: lease, Cost: 1},
		Store:  e.store, Now: now,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func req(key string) edgelimit.Request { return edgelimit.Request{Key: key, Cost: 1} }

// allow takes a slot and checks the decision's invariants.
func (e *env) allow(r edgelimit.Request) edgelimit.Decision {
	e.t.Helper()
	d, err := e.lim.Allow(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Allow(%q): %v", r.Key, err)
	}
	if msg := Check(d, true); msg != "" {
		e.t.Fatalf("Allow(%q) = %+v: %s", r.Key, d, msg)
	}
	return d
}

func (e *env) want(r edgelimit.Request, allowed bool, remaining int64) edgelimit.Decision {
	e.t.Helper()
	d := e.allow(r)
	if d.Allowed != allowed || d.Remaining != remaining {
		e.t.Fatalf("at T0+%s: Allow(%q) = allowed %v, remaining %d; want allowed %v, remaining %d",
			e.clock.Now().Sub(T0), r.Key, d.Allowed, d.Remaining, allowed, remaining)
	}
	return d
}

func (e *env) finish(r edgelimit.Request, d edgelimit.Decision) {
	e.t.Helper()
	if err := e.lim.Finish(e.ctx, r, d, 200, 0); err != nil {
		e.t.Fatalf("Finish: %v", err)
	}
}

func (e *env) peek(r edgelimit.Request) edgelimit.Decision {
	e.t.Helper()
	d, err := e.lim.Peek(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Peek(%q): %v", r.Key, err)
	}
	if msg := Check(d, false); msg != "" {
		e.t.Fatalf("Peek(%q) = %+v: %s", r.Key, d, msg)
	}
	return d
}

// Check returns what is wrong with an in-flight decision, or "": the
// invariants the engine and draft-11 need. took says whether the decision
// came from Allow (an allowed one must carry a Receipt naming its slot) or
// from Peek (none).
func Check(d edgelimit.Decision, took bool) string {
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
	case d.Allowed && took && d.Remaining > d.Limit-1:
		return "allowed, but Remaining does not count the slot it took"
	case d.Allowed && took && d.Receipt.ID == [16]byte{}:
		return "allowed without a slot id in its Receipt"
	case d.Allowed && took && d.Receipt.Slot <= d.Receipt.At:
		return "the Receipt's lease ends before it starts"
	case (!d.Allowed || !took) && d.Receipt != edgelimit.Receipt{}:
		return "a denial or a peek carries a Receipt"
	case !d.Allowed && d.Remaining != 0:
		return "denied although a slot is free"
	case !d.Allowed && d.RetryAfter < d.Reset:
		return "RetryAfter is before Reset"
	}
	return ""
}

func (s *suite) testTakeRelease(t *testing.T) {
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
func (s *suite) testExactRelease(t *testing.T) {
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

func (s *suite) testDoubleRelease(t *testing.T) {
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

func (s *suite) testRefund(t *testing.T) {
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

func (s *suite) testPeek(t *testing.T) {
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
func (s *suite) testLeaseBoundary(t *testing.T) {
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
func (s *suite) testLateRelease(t *testing.T) {
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

func (s *suite) testRetryAfter(t *testing.T) {
	e := s.newEnv(t, 1, time.Minute)
	a := e.want(req("k"), true, 0)
	if a.Reset != inflight.DefaultRetryAfter {
		t.Errorf("allowed: Reset = %s, want the retry hint %s", a.Reset, inflight.DefaultRetryAfter)
	}
	d := e.want(req("k"), false, 0)
	if d.RetryAfter != inflight.DefaultRetryAfter || d.Reset != d.RetryAfter {
		t.Errorf("denied with the lease a minute away: Reset, RetryAfter = %s, %s; want %s", d.Reset, d.RetryAfter, inflight.DefaultRetryAfter)
	}
	e.clock.Set(T0.Add(time.Minute - 300*time.Millisecond))
	d = e.want(req("k"), false, 0)
	if d.RetryAfter != 300*time.Millisecond || d.Reset != d.RetryAfter {
		t.Errorf("denied 300ms before the lease ends: Reset, RetryAfter = %s, %s; want 300ms", d.Reset, d.RetryAfter)
	}
	// A configured hint.
	l, err := inflight.New(inflight.Config{
		Policy:  &policy.Policy{Name: fmt.Sprintf("hint-%d", policies.Add(1)), Limit: 1, Window: time.Minute},
		Options: &inflight.Options{RetryAfter: 5 * time.Second}, Store: e.store, Now: e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Set(T0)
	if _, err := l.Allow(e.ctx, req("k")); err != nil {
		t.Fatal(err)
	}
	d, err = l.Allow(e.ctx, req("k"))
	if err != nil || d.Allowed || d.RetryAfter != 5*time.Second {
		t.Errorf("with retry_after 5s: %+v, %v; want denied, RetryAfter 5s", d, err)
	}
}

func (s *suite) testKeys(t *testing.T) {
	e := s.newEnv(t, 1, time.Minute)
	a := e.want(req("a"), true, 0)
	e.want(req("b"), true, 0)
	e.want(req("a"), false, 0)
	e.finish(req("b"), a) // a's receipt under b's key: not b's slot
	e.want(req("b"), false, 0)
	e.finish(req("a"), a)
	e.want(req("a"), true, 0)
	// Another policy on the same store: its own slots.
	other := e.limiter(1, time.Minute, e.clock.Now)
	if d, err := other.Allow(e.ctx, req("a")); err != nil || !d.Allowed {
		t.Fatalf("another policy, same key: %+v, %v; want allowed", d, err)
	}
}

// testLimits: a tier's or an override's limit and lease (Request.Limits)
// replace the policy's.
func (s *suite) testLimits(t *testing.T) {
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

func (s *suite) testLimitZero(t *testing.T) {
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
func (s *suite) testRequestAt(t *testing.T) {
	e := s.newEnv(t, 1, 10*time.Second)
	e.lim = e.limiter(1, 10*time.Second, nil)
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

// round has n clients take a slot of key at once and returns the allowed
// decisions, checking every decision and that the denials are real.
func (e *env) round(n int, key string) []edgelimit.Decision {
	e.t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		allowed []edgelimit.Decision
		errs    []error
		start   = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			d, err := e.lim.Allow(e.ctx, req(key))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case Check(d, true) != "":
				errs = append(errs, fmt.Errorf("%+v: %s", d, Check(d, true)))
			case d.Allowed:
				allowed = append(allowed, d)
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
	return allowed
}

// testRounds: rounds of simultaneous takes, each of which must admit
// exactly the slots that are free: none released, some released, all
// released, all expired (reclaimed by contending clients), and half
// expired.
func (s *suite) testRounds(t *testing.T) {
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
func (s *suite) testChurn(t *testing.T) {
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
