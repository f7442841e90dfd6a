package limitertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// refLimiter is the simplest exact implementation of each algorithm: its
// reference model under one mutex per backend. It checks the suite itself
// (a suite no correct backend can pass is as useless as one every backend
// passes).
type refBackend struct {
	mu sync.Mutex
	m  model
}

type refLimiter struct {
	b   *refBackend
	p   edgelimit.Policy
	now func() time.Time
}

var (
	_ edgelimit.BatchLimiter = (*refLimiter)(nil)
	_ edgelimit.Refunder     = (*refLimiter)(nil)
)

func (l *refLimiter) Allow(_ context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	d := l.b.m.allow(&l.p, req.Key, req.Units(), l.now())
	d.Policy = l.p.Name
	return d, nil
}

func (l *refLimiter) Refund(_ context.Context, req edgelimit.Request, _ edgelimit.Decision) error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.b.m.refund(&l.p, req.Key, req.Units(), l.now())
	return nil
}

func (l *refLimiter) BatchKey() string { return fmt.Sprintf("ref/%p", l.b) }

func (l *refLimiter) AllowBatch(_ context.Context, items []edgelimit.BatchItem) ([]edgelimit.Decision, error) {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	now := l.now()
	out := make([]edgelimit.Decision, len(items))
	ok := true
	for _, it := range items {
		m := it.Limiter.(*refLimiter)
		ok = ok && l.b.m.fits(&m.p, it.Request.Key, it.Request.Units(), now)
	}
	for i, it := range items {
		m := it.Limiter.(*refLimiter)
		if ok {
			out[i] = l.b.m.allow(&m.p, it.Request.Key, it.Request.Units(), now)
		} else {
			out[i] = l.b.m.peek(&m.p, it.Request.Key, it.Request.Units(), now)
		}
		out[i].Policy = m.p.Name
	}
	return out, nil
}

func TestReference(t *testing.T) {
	for _, alg := range []string{edgelimit.AlgorithmFixedWindow, edgelimit.AlgorithmSlidingWindow, edgelimit.AlgorithmSlidingLog, edgelimit.AlgorithmGCRA} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			Run(t, func(t *testing.T) NewLimiter {
				b := &refBackend{m: newModel(alg)}
				return func(p *edgelimit.Policy, now func() time.Time) (edgelimit.Limiter, error) {
					return &refLimiter{b: b, p: *p, now: now}, nil
				}
			}, Options{Algorithm: alg, Batch: true, Refund: true, Concurrency: true})
		})
	}
}

func TestWindowStart(t *testing.T) {
	for _, tc := range []struct {
		at   time.Time
		w    time.Duration
		want time.Time
	}{
		{time.Unix(1_700_000_000, 0), time.Minute, time.Unix(1_699_999_980, 0)},
		{time.Unix(1_700_000_000, 0), 24 * time.Hour, time.Unix(1_699_920_000, 0)},
		{time.Unix(1_700_000_000, 0), 1500 * time.Millisecond, time.Unix(1_699_999_999, 500_000_000)},
		{time.Unix(-1, 0), time.Minute, time.Unix(-60, 0)},
	} {
		if got := WindowStart(tc.at, tc.w); !got.Equal(tc.want) {
			t.Errorf("WindowStart(%d, %s) = %d, want %d", tc.at.Unix(), tc.w, got.UnixNano(), tc.want.UnixNano())
		}
	}
}

func TestCheckDecision(t *testing.T) {
	p := &edgelimit.Policy{Name: "p", Algorithm: edgelimit.AlgorithmFixedWindow, Limit: 5, Window: time.Minute}
	ok := edgelimit.Decision{Allowed: true, Limit: 5, Window: time.Minute, Remaining: 3, Reset: time.Second}
	if msg := checkDecision(p, 2, ok); msg != "" {
		t.Errorf("checkDecision(valid allowed) = %q, want \"\"", msg)
	}
	denied := edgelimit.Decision{Limit: 5, Window: time.Minute, Remaining: 1, Reset: time.Second, RetryAfter: time.Second}
	if msg := checkDecision(p, 2, denied); msg != "" {
		t.Errorf("checkDecision(valid denied) = %q, want \"\"", msg)
	}
	for name, bad := range map[string]func(d *edgelimit.Decision){
		"negative remaining":   func(d *edgelimit.Decision) { d.Remaining = -1 },
		"remaining over limit": func(d *edgelimit.Decision) { d.Remaining = 6 },
		"retry when allowed":   func(d *edgelimit.Decision) { d.RetryAfter = time.Second },
		"cost not spent":       func(d *edgelimit.Decision) { d.Remaining = 4 },
		"wrong limit":          func(d *edgelimit.Decision) { d.Limit = 4 },
		"wrong window":         func(d *edgelimit.Decision) { d.Window = time.Hour },
		"reset past window":    func(d *edgelimit.Decision) { d.Reset = 2 * time.Minute },
		"no reset":             func(d *edgelimit.Decision) { d.Reset = 0 },
		"degraded":             func(d *edgelimit.Decision) { d.Degraded = true },
		"other policy":         func(d *edgelimit.Decision) { d.Policy = "q" },
	} {
		d := ok
		bad(&d)
		if checkDecision(p, 2, d) == "" {
			t.Errorf("checkDecision(%s: %+v) = \"\", want a complaint", name, d)
		}
	}
	for name, bad := range map[string]func(d *edgelimit.Decision){
		"no retry":           func(d *edgelimit.Decision) { d.RetryAfter = 0 },
		"remaining covers":   func(d *edgelimit.Decision) { d.Remaining = 2 },
		"retry beyond reset": func(d *edgelimit.Decision) { d.RetryAfter = 2 * time.Second },
	} {
		d := denied
		bad(&d)
		if checkDecision(p, 2, d) == "" {
			t.Errorf("checkDecision(denied, %s: %+v) = \"\", want a complaint", name, d)
		}
	}
}
