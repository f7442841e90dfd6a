package limitertest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// fullStep is one request of a step table with every field of the
// decision given: at is relative to the test's start ws, cost 0 means 1.
type fullStep struct {
	at          time.Duration
	cost        int64
	allowed     bool
	remaining   int64
	reset, wait time.Duration // wait is RetryAfter
}

func runFullSteps(t *testing.T, e *env, l *lim, ws time.Time, steps []fullStep) {
	t.Helper()
	for i, st := range steps {
		e.clock.Set(ws.Add(st.at))
		d := l.allow("k", st.cost)
		got := [4]any{d.Allowed, d.Remaining, d.Reset, d.RetryAfter}
		want := [4]any{st.allowed, st.remaining, st.reset, st.wait}
		if got != want {
			t.Errorf("step %d: Allow(cost %d) at ws+%s = {Allowed, Remaining, Reset, RetryAfter} %v, want %v",
				i, st.cost, st.at, got, want)
		}
	}
}

const (
	msec = time.Millisecond
	sec  = time.Second
)

// testSlidingWindowSteps: limit 10 per minute. The estimate is
// count(this window) + ceil(count(previous window) * share of the previous
// window still inside the last minute); Reset is when it has fallen by one.
// (Regression, issue #10: Reset was when the estimate is zero again, 1767 s
// for a denial whose Retry-After was 4167 s on a 1 h window.)
func (s *suite) testSlidingWindowSteps(t *testing.T) {
	e := s.env(t)
	l := e.limiter("steps", 10, time.Minute)
	ws := WindowStart(T0, time.Minute).Add(time.Minute)
	runFullSteps(t, e, l, ws, []fullStep{
		// 4 counted: they weigh fully to the window's end, then
		// ceil(4*(120-t)/60) <= 3 from ws+75s on.
		{at: 0, cost: 4, allowed: true, remaining: 6, reset: 75 * sec},
		// 10 counted: ceil(10*(120-t)/60) <= 9 from ws+66s on.
		{at: 30 * sec, cost: 6, allowed: true, remaining: 0, reset: 36 * sec},
		// Full: one unit fits when the estimate has fallen by one.
		{at: 45 * sec, cost: 1, allowed: false, remaining: 0, reset: 21 * sec, wait: 21 * sec},
		// The boundary: the previous window still weighs all 10.
		{at: 60 * sec, cost: 1, allowed: false, remaining: 0, reset: 6 * sec, wait: 6 * sec},
		// 1 + ceil(10*54/60) = 10; 1 + ceil(10*(120-t)/60) <= 9 at ws+72s.
		{at: 66 * sec, cost: 1, allowed: true, remaining: 0, reset: 6 * sec},
		// ceil(10*30/60) = 5 from the previous window, 1 in this one: 4 left.
		{at: 90 * sec, cost: 5, allowed: false, remaining: 4, reset: 6 * sec, wait: 6 * sec},
		{at: 90 * sec, cost: 4, allowed: true, remaining: 0, reset: 6 * sec},
		// Previous window 5, half of it weighs: ceil(2.5) = 3.
		{at: 150 * sec, cost: 7, allowed: true, remaining: 0, reset: 6 * sec},
		{at: 150 * sec, cost: 1, allowed: false, remaining: 0, reset: 6 * sec, wait: 6 * sec},
		// After an idle window nothing weighs.
		{at: 300 * sec, cost: 10, allowed: true, remaining: 0, reset: 66 * sec},
		// Above the limit: never fits; RetryAfter is the window, or the
		// effective window if that is longer.
		{at: 300 * sec, cost: 11, allowed: false, remaining: 0, reset: 66 * sec, wait: 66 * sec},
		// Nothing counted: until the window ends.
		{at: 1000 * sec, cost: 11, allowed: false, remaining: 10, reset: 20 * sec, wait: 60 * sec},
	})
}

// testSlidingLogSteps: limit 5 per minute, exact: units admitted less than
// a minute ago count, at millisecond resolution.
func (s *suite) testSlidingLogSteps(t *testing.T) {
	e := s.env(t)
	l := e.limiter("steps", 5, time.Minute)
	ws := WindowStart(T0, time.Minute).Add(time.Minute)
	runFullSteps(t, e, l, ws, []fullStep{
		// Reset: until the oldest unit in the window leaves it.
		{at: 0, cost: 2, allowed: true, remaining: 3, reset: 60 * sec},
		{at: 10 * sec, cost: 2, allowed: true, remaining: 1, reset: 50 * sec},
		// Cost above what is left: the 2 units of ws+0 leave at ws+60s.
		{at: 20 * sec, cost: 2, allowed: false, remaining: 1, reset: 40 * sec, wait: 40 * sec},
		{at: 20 * sec, cost: 1, allowed: true, remaining: 0, reset: 40 * sec},
		{at: 60*sec - msec, cost: 1, allowed: false, remaining: 0, reset: msec, wait: msec},
		// A minute after ws+0 its units are out of the window.
		{at: 60 * sec, cost: 2, allowed: true, remaining: 0, reset: 10 * sec},
		{at: 61 * sec, cost: 1, allowed: false, remaining: 0, reset: 9 * sec, wait: 9 * sec},
		{at: 70 * sec, cost: 2, allowed: true, remaining: 0, reset: 10 * sec},
		{at: 70 * sec, cost: 6, allowed: false, remaining: 0, reset: 10 * sec, wait: 60 * sec},
		{at: 180 * sec, cost: 5, allowed: true, remaining: 0, reset: 60 * sec},
		// Nothing in the window: the whole window.
		{at: 300 * sec, cost: 6, allowed: false, remaining: 5, reset: 60 * sec, wait: 60 * sec},
	})
}

// testGCRASteps: 10 per 10 s (one every second) with a burst of 3: the
// client is told q=3, w=3s. Reset is until the next unit comes back.
// (Regression, issue #10: Reset was until the bucket is full, t=5 next to
// Retry-After: 1 for a denial.)
func (s *suite) testGCRASteps(t *testing.T) {
	e := s.env(t)
	l := e.limiterBurst("steps", 10, 10*time.Second, 3)
	ws := WindowStart(T0, time.Minute).Add(time.Minute)
	runFullSteps(t, e, l, ws, []fullStep{
		{at: 0, cost: 1, allowed: true, remaining: 2, reset: 1 * sec},
		{at: 0, cost: 2, allowed: true, remaining: 0, reset: 1 * sec},
		// The bucket is empty: one unit drips in every second.
		{at: 0, cost: 1, allowed: false, remaining: 0, reset: 1 * sec, wait: 1 * sec},
		{at: 1 * sec, cost: 1, allowed: true, remaining: 0, reset: 1 * sec},
		// Half a unit in the bucket after this one: the next is 0.5 s away.
		{at: 2500 * msec, cost: 1, allowed: true, remaining: 0, reset: 500 * msec},
		{at: 2500 * msec, cost: 2, allowed: false, remaining: 0, reset: 500 * msec, wait: 1500 * msec},
		{at: 4 * sec, cost: 2, allowed: true, remaining: 0, reset: 1 * sec},
		// Idle for long: the bucket is full again, and holds 3.
		{at: 20 * sec, cost: 3, allowed: true, remaining: 0, reset: 1 * sec},
		{at: 20 * sec, cost: 4, allowed: false, remaining: 0, reset: 1 * sec, wait: 10 * sec},
		{at: 30 * sec, cost: 1, allowed: true, remaining: 2, reset: 1 * sec},
		// A full bucket: one interval, the time a unit spent now takes to
		// come back.
		{at: 40 * sec, cost: 4, allowed: false, remaining: 3, reset: 1 * sec, wait: 10 * sec},
	})
}

// testGCRABurst pins the bucket's burst (nginx's limit_req nodelay with
// burst=B-1): from idle, burst requests pass at once, then exactly one per
// emission interval.
func (s *suite) testGCRABurst(t *testing.T) {
	e := s.env(t)
	l := e.limiterBurst("burst", 60, time.Minute, 5) // one a second, burst 5
	ws := WindowStart(T0, time.Minute).Add(time.Minute)
	admitted := 0
	for range 8 {
		e.clock.Set(ws)
		if l.allow("k", 1).Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("admitted %d of 8 at once with burst 5, want 5", admitted)
	}
	for sec := 1; sec <= 10; sec++ {
		e.clock.Set(ws.Add(time.Duration(sec) * time.Second))
		n := 0
		for range 3 {
			if l.allow("k", 1).Allowed {
				n++
			}
		}
		if n != 1 {
			t.Errorf("at ws+%ds: admitted %d of 3, want 1 (one per second once the burst is spent)", sec, n)
		}
	}
}

// testNoBoundaryBurst: the fixed window's boundary burst (the limit at the
// end of one window and again at the start of the next) must not happen.
func (s *suite) testNoBoundaryBurst(t *testing.T) {
	e := s.env(t)
	const limit = 10
	l := e.limiter("burst", limit, time.Minute)
	ws := WindowStart(T0, time.Minute).Add(time.Minute)
	admitted := 0
	for _, at := range []time.Duration{59*time.Second + 500*time.Millisecond, time.Minute + 500*time.Millisecond} {
		e.clock.Set(ws.Add(at))
		for range limit + 2 {
			if l.allow("k", 1).Allowed {
				admitted++
			}
		}
	}
	if admitted != limit {
		t.Errorf("%s admitted %d within one second around a window boundary, want %d (the limit: no boundary burst)", s.opts.Algorithm, admitted, limit)
	}
}

// testModel drives two policies and three keys with a fixed pseudo-random
// sequence of steps (clock advances, costs from 0 to above the limit; when
// the backend has them, refunds of recent admissions, some right away and
// some after the clock moved on, and peeks) and compares every decision
// with the algorithm's reference model.
func (s *suite) testModel(t *testing.T) {
	e := s.env(t)
	lims := []*lim{e.limiter("model-a", 7, 10*time.Second), e.limiter("model-b", 3, 1500*time.Millisecond)}
	if s.opts.Algorithm == GCRA {
		lims = append(lims, e.limiterBurst("model-c", 4, 2*time.Second, 6))
	}
	keys := []string{"k1", "k2", "k3"}
	m := newModel(s.opts.Algorithm)
	rng := rand.New(rand.NewPCG(1, 2))
	steps := 300
	if s.opts.Quick {
		steps = 60
	}
	// spent are admissions not refunded yet: the backend's decision and
	// the model's.
	type admission struct {
		l         *lim
		key       string
		cost      int64
		got, want edgelimit.Decision
	}
	var spent []admission
	same := func(got, want edgelimit.Decision) bool {
		got.Policy, got.Receipt, want.Receipt = "", edgelimit.Receipt{}, edgelimit.Receipt{}
		return got == want
	}
	for i := range steps {
		if rng.IntN(4) != 0 { // else another request at the same instant
			e.clock.Advance(time.Duration(rng.Int64N(int64(3 * time.Second))))
		}
		l := lims[rng.IntN(len(lims))]
		key := keys[rng.IntN(len(keys))]
		cost := rng.Int64N(Capacity(l.p) + 2) // 0 (default 1) .. capacity+1
		now := e.clock.Now()
		units := max(cost, 1)
		if s.opts.Peek && rng.IntN(5) == 0 {
			want := m.peek(l.p, key, units, now)
			if got := l.peek(key, cost); !same(got, want) {
				t.Fatalf("step %d: %s.Peek(%q, %d) at %s = %+v, want %+v", i, l.p.Name, key, cost, e.at(), got, want)
			}
		}
		want := m.allow(l.p, key, units, now)
		got := l.allow(key, cost)
		if !same(got, want) {
			t.Fatalf("step %d: %s.Allow(%q, %d) at %s = %+v, want %+v", i, l.p.Name, key, cost, e.at(), got, want)
		}
		if !s.opts.Refund {
			continue
		}
		if got.Allowed {
			spent = append(spent, admission{l, key, cost, got, want})
			if len(spent) > 6 {
				spent = spent[1:]
			}
		}
		// Refund one of the recent admissions: the last one right away
		// (the engine's case), or an older one, later.
		if len(spent) > 0 && rng.IntN(5) == 0 {
			k := len(spent) - 1
			if rng.IntN(2) == 0 {
				k = rng.IntN(len(spent))
			}
			a := spent[k]
			spent = append(spent[:k], spent[k+1:]...)
			a.l.refund(a.key, a.cost, a.got)
			m.refund(a.l.p, a.key, max(a.cost, 1), now, a.want)
		}
	}
}
