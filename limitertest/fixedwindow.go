package limitertest

import (
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// step is one request of a step table: at is relative to the test's window
// start ws, cost 0 means the default of 1.
type step struct {
	at            time.Duration
	cost          int64
	wantAllowed   bool
	wantRemaining int64
}

// runSteps runs a step table against l and checks Reset and RetryAfter of
// a fixed window: the time to the window's end, RetryAfter only on a denial.
func runSteps(t *testing.T, e *env, l *lim, ws time.Time, steps []step) {
	t.Helper()
	for i, st := range steps {
		now := ws.Add(st.at)
		e.clock.Set(now)
		d := l.allow("k", st.cost)
		wantReset := WindowStart(now, l.p.Window).Add(l.p.Window).Sub(now)
		var wantRetry time.Duration
		if !st.wantAllowed {
			wantRetry = wantReset
		}
		got := [4]any{d.Allowed, d.Remaining, d.Reset, d.RetryAfter}
		want := [4]any{st.wantAllowed, st.wantRemaining, wantReset, wantRetry}
		if got != want {
			t.Errorf("step %d: Allow(cost %d) at ws+%s = {Allowed, Remaining, Reset, RetryAfter} %v, want %v",
				i, st.cost, st.at, got, want)
		}
	}
}

func (s *suite) testFixedWindowSteps(t *testing.T) {
	e := s.env(t)
	l := e.limiter("steps", 5, time.Minute)
	ws := WindowStart(T0, time.Minute).Add(time.Minute)
	runSteps(t, e, l, ws, []step{
		{at: 0, cost: 1, wantAllowed: true, wantRemaining: 4},
		{at: 10 * time.Second, cost: 2, wantAllowed: true, wantRemaining: 2},
		{at: 20 * time.Second, cost: 3, wantAllowed: false, wantRemaining: 2}, // cost > remaining: nothing spent
		{at: 30 * time.Second, cost: 2, wantAllowed: true, wantRemaining: 0},
		{at: 40 * time.Second, cost: 1, wantAllowed: false, wantRemaining: 0},
		{at: 59*time.Second + 999*time.Millisecond, cost: 1, wantAllowed: false, wantRemaining: 0},
		{at: time.Minute, cost: 1, wantAllowed: true, wantRemaining: 4}, // next window starts empty
		{at: time.Minute, cost: 5, wantAllowed: false, wantRemaining: 4},
		{at: time.Minute + time.Second, cost: 4, wantAllowed: true, wantRemaining: 0},
		{at: 2*time.Minute - time.Nanosecond, cost: 0, wantAllowed: false, wantRemaining: 0},
		{at: 3*time.Minute + 30*time.Second, cost: 5, wantAllowed: true, wantRemaining: 0}, // after an idle window
		{at: 3*time.Minute + 31*time.Second, cost: 1, wantAllowed: false, wantRemaining: 0},
	})
}

// testFixedWindowBoundaryBurst pins the fixed window's known weakness: a
// client can spend the limit at the end of one window and again at the
// start of the next, twice the limit within a second.
func (s *suite) testFixedWindowBoundaryBurst(t *testing.T) {
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
	if admitted != 2*limit {
		t.Errorf("admitted %d within one second around a window boundary, want %d (2x the limit of %d: fixed windows allow that burst)", admitted, 2*limit, limit)
	}
}

// fixedModel is the reference fixed window the randomised test compares
// against: a map of counts per policy, key and window.
type fixedModel struct {
	counts map[modelKey]int64
}

type modelKey struct {
	policy, key string
	start       int64
}

func (m *fixedModel) allow(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision {
	ws := WindowStart(now, p.Window)
	k := modelKey{p.Name, key, ws.UnixNano()}
	n := m.counts[k]
	d := decision(p, n+cost <= p.Limit)
	d.Reset = ws.Add(p.Window).Sub(now)
	if d.Allowed {
		m.counts[k] = n + cost
		d.Remaining = p.Limit - n - cost
		d.Receipt.At = now.UnixNano()
		return d
	}
	d.Remaining = min(p.Limit-n, cost-1)
	d.RetryAfter = d.Reset
	return d
}

// refund gives back to the decision's window, while it lasts; never to a
// later window.
func (m *fixedModel) refund(p *Spec, key string, cost int64, now time.Time, d edgelimit.Decision) {
	if !spent(d) {
		return
	}
	ws := WindowStart(at(d), p.Window)
	if !now.Before(ws.Add(p.Window)) {
		return
	}
	k := modelKey{p.Name, key, ws.UnixNano()}
	if m.counts[k] >= cost {
		m.counts[k] -= cost
	}
}
