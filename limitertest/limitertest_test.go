package limitertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
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
	p   Spec
	now func() time.Time
}

var (
	_ edgelimit.BatchLimiter = (*refLimiter)(nil)
	_ edgelimit.Refunder     = (*refLimiter)(nil)
	_ edgelimit.Peeker       = (*refLimiter)(nil)
)

func (l *refLimiter) Allow(_ context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	d := l.b.m.allow(&l.p, req.Key, req.Units(), l.now())
	d.Policy = l.p.Name
	return d, nil
}

func (l *refLimiter) Refund(_ context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.b.m.refund(&l.p, req.Key, req.Units(), l.now(), d)
	return nil
}

func (l *refLimiter) Peek(_ context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	d := l.b.m.peek(&l.p, req.Key, req.Units(), l.now())
	d.Policy = l.p.Name
	return d, nil
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
	for _, alg := range []string{FixedWindow, SlidingWindow, SlidingLog, GCRA, TokenBucket} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			Run(t, func(t *testing.T) NewLimiter {
				b := &refBackend{m: newModel(alg)}
				return func(s Spec) (edgelimit.Limiter, error) {
					return &refLimiter{b: b, p: s, now: s.Now}, nil
				}
			}, Options{Algorithm: alg, Batch: true, Refund: true, Peek: true, Concurrency: true})
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
	p := &Spec{Policy: &policy.Policy{Name: "p", Limit: 5, Window: time.Minute}, Algorithm: FixedWindow}
	ok := edgelimit.Decision{Allowed: true, Limit: 5, Window: time.Minute, Remaining: 3, Reset: time.Second, Receipt: edgelimit.Receipt{At: 1}}
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
		"negative reset":       func(d *edgelimit.Decision) { d.Reset = -time.Second },
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
		"retry before reset": func(d *edgelimit.Decision) { d.RetryAfter = time.Second / 2 },
	} {
		d := denied
		bad(&d)
		if checkDecision(p, 2, d) == "" {
			t.Errorf("checkDecision(denied, %s: %+v) = \"\", want a complaint", name, d)
		}
	}
}

func TestCheckReceipt(t *testing.T) {
	spent := edgelimit.Decision{Allowed: true, Receipt: edgelimit.Receipt{At: 1}}
	for _, tc := range []struct {
		name   string
		d      edgelimit.Decision
		spends bool
		bad    bool
	}{
		{"allowed with a receipt", spent, true, false},
		{"allowed without one", edgelimit.Decision{Allowed: true}, true, true},
		{"denied without one", edgelimit.Decision{}, true, false},
		{"denied with one", edgelimit.Decision{Receipt: edgelimit.Receipt{At: 1}}, true, true},
		{"a peek with one", spent, false, true},
		{"a peek without one", edgelimit.Decision{Allowed: true}, false, false},
	} {
		if got := checkReceipt(tc.d, tc.spends) != ""; got != tc.bad {
			t.Errorf("checkReceipt(%s) complains %v, want %v", tc.name, got, tc.bad)
		}
	}
}

func TestQuota(t *testing.T) {
	for _, tc := range []struct {
		alg          string
		limit, burst int64
		window       time.Duration
		q            int64
		w            time.Duration
	}{
		{GCRA, 10, 20, time.Second, 20, 2 * time.Second},
		{GCRA, 10, 0, time.Second, 10, time.Second},
		{GCRA, 10, 10, time.Second, 10, time.Second},
		{GCRA, 10, 3, 10 * time.Second, 3, 3 * time.Second},
		{TokenBucket, 10, 20, time.Second, 20, 2 * time.Second},
		{TokenBucket, 10, 0, time.Second, 10, time.Second},
		{FixedWindow, 10, 20, time.Minute, 10, time.Minute},
	} {
		p := &Spec{Policy: &policy.Policy{Limit: tc.limit, Window: tc.window}, Algorithm: tc.alg, Burst: tc.burst}
		if q, w := Quota(p); q != tc.q || w != tc.w {
			t.Errorf("Quota(%s %d/%s burst %d) = %d, %s; want %d, %s", tc.alg, tc.limit, tc.window, tc.burst, q, w, tc.q, tc.w)
		}
	}
}

// TestAbilitiesNamesEveryAbility: Abilities knows every ability
// policy.Abilities names, each by the interface of its name, so that a new
// ability cannot be missing from CheckAbilities.
func TestAbilitiesNamesEveryAbility(t *testing.T) {
	known := map[policy.Abilities]string{}
	for _, a := range abilities {
		known[a.bit] = a.name
	}
	for i := range 16 {
		bit := policy.Abilities(1 << i)
		name := bit.String()
		if name == "none" {
			continue
		}
		if known[bit] != name {
			t.Errorf("ability %s (bit %d): limitertest knows it as %q", name, i, known[bit])
		}
	}
	if len(known) != len(abilities) {
		t.Errorf("two abilities share a bit")
	}
}

func TestCheckAbilities(t *testing.T) {
	var l edgelimit.Limiter = LimiterFunc(func(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
		return edgelimit.Decision{}, nil
	})
	if got := Abilities(l); got != 0 {
		t.Errorf("Abilities(a bare Limiter) = %v, want none", got)
	}
	ft := &fakeT{}
	CheckAbilities(ft, &policy.Strategy{Name: "x", Abilities: policy.CanRefund}, l)
	if !ft.failed {
		t.Error("CheckAbilities accepted a limiter without the Refunder its strategy declares")
	}
}

// fakeT records a failure.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.failed = true }
