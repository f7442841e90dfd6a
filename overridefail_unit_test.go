package edgelimit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// flakyOverrides is an override store whose reads fail while err is set.
type flakyOverrides struct {
	mu    sync.Mutex
	m     map[string]policy.Limits
	err   error
	reads int
}

func (o *flakyOverrides) Override(_ context.Context, _, key string) (policy.Limits, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reads++
	if o.err != nil {
		return policy.Limits{}, false, o.err
	}
	l, ok := o.m[key]
	return l, ok, nil
}

func (o *flakyOverrides) SetOverride(_ context.Context, _, key string, l policy.Limits, _ time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[key] = l
	return nil
}

func (o *flakyOverrides) DeleteOverride(_ context.Context, _, key string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, key)
	return nil
}

func (o *flakyOverrides) fail(err error) {
	o.mu.Lock()
	o.err = err
	o.mu.Unlock()
}

// limitsSeen records the limits the store's limiter and its twin decided
// under.
type limitsSeen struct {
	mu          sync.Mutex
	store, twin []int64
}

type seenLimiter struct {
	s    *limitsSeen
	twin bool
}

func (l seenLimiter) Allow(_ context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.twin {
		l.s.twin = append(l.s.twin, r.Limits.Limit)
	} else {
		l.s.store = append(l.s.store, r.Limits.Limit)
	}
	lim := int64(6)
	if r.Limits.Limit > 0 {
		lim = r.Limits.Limit
	}
	return edgelimit.Decision{Allowed: true, Limit: lim, Remaining: lim - 1, Window: time.Hour, Reset: time.Hour}, nil
}

func (l seenLimiter) Local() (edgelimit.Limiter, error) { return seenLimiter{s: l.s, twin: true}, nil }

// At fixed instants: what each on_store_error makes of a failed override
// read, warm (the key's override, 2, was read before) and cold, and that
// a failure is never cached (the next request reads again) while the last
// known override is kept until a read succeeds.
func TestOverrideReadFailureUnit(t *testing.T) {
	type want struct {
		status   int
		store    []int64 // the limits the store's limiter saw
		twin     []int64
		ovrErrs  int
		degraded bool
	}
	for _, tc := range []struct {
		mode       string
		warm, cold want
	}{
		{"deny", want{status: 503, ovrErrs: 1, degraded: true}, want{status: 503, ovrErrs: 1, degraded: true}},
		{"local", want{status: 200, twin: []int64{2}, ovrErrs: 1, degraded: true}, want{status: 200, twin: []int64{0}, ovrErrs: 1, degraded: true}},
		{"allow", want{status: 200, store: []int64{2}, ovrErrs: 1}, want{status: 200, ovrErrs: 1, degraded: true}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			f, err := policy.Parse("p.yaml", []byte(`version: 1
policies:
  - {name: p, routes: ["GET /p"], key: header:X-Key, strategy: durable, limit: 6, window: 1h, overrides: true,
     override_staleness: 1m, on_store_error: `+tc.mode+`, store_breaker: off}
`))
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1_700_000_000, 0)
			ovr := &flakyOverrides{m: map[string]policy.Limits{}}
			seen := &limitsSeen{}
			var events []edgelimit.Event
			e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)), Overrides: ovr,
				Now: func() time.Time { return now }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Observe:  func(ev edgelimit.Event) { events = append(events, ev) },
				Limiters: func(*policy.Policy) (edgelimit.Limiter, error) { return seenLimiter{s: seen}, nil }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, k := range []string{"warm", "cold"} {
				if err := e.SetOverride(ctx, "p", k, policy.Limits{Limit: 2}, time.Time{}); err != nil {
					t.Fatal(err)
				}
			}
			do := func(key string) *edgelimit.Verdict {
				return e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/p", SourceIP: "192.0.2.1",
					Header: limitertest.Headers{"X-Key": key}})
			}
			status := func(v *edgelimit.Verdict) int {
				if v.Status == 0 {
					return 200
				}
				return v.Status
			}
			if v := do("warm"); status(v) != 200 {
				t.Fatalf("reads working: status %d", v.Status)
			}
			now = now.Add(time.Minute) // stale: the next request reads again
			ovr.fail(errors.New("AccessDeniedException: not authorized"))
			for key, w := range map[string]want{"warm": tc.warm, "cold": tc.cold} {
				seen.store, seen.twin, events = nil, nil, nil
				before := ovr.reads
				v := do(key)
				n := 0
				for _, ev := range events {
					if ev.OverrideError != nil {
						n++
					}
				}
				deg := len(events) == 1 && events[0].Degraded
				if status(v) != w.status || !equalInts(seen.store, w.store) || !equalInts(seen.twin, w.twin) || n != w.ovrErrs || deg != w.degraded {
					t.Errorf("%s: status %d, store saw %v, twin saw %v, %d override errors, degraded %v; want %d, %v, %v, %d, %v",
						key, status(v), seen.store, seen.twin, n, deg, w.status, w.store, w.twin, w.ovrErrs, w.degraded)
				}
				if ovr.reads != before+1 {
					t.Errorf("%s: %d reads, want 1", key, ovr.reads-before)
				}
				v.Release()
			}
			// Not cached: the next request reads again, and the last known
			// override is still the one in force.
			before := ovr.reads
			do("warm").Release()
			if ovr.reads != before+1 {
				t.Errorf("a failed read was cached: %d reads, want 1", ovr.reads-before)
			}
			// The reads come back: the store's answer (the override
			// changed meanwhile) is in force, and cached again.
			ovr.fail(nil)
			ovr.m[edgelimitHash(t, "p", "h:warm")] = policy.Limits{Limit: 9}
			seen.store, seen.twin = nil, nil
			do("warm").Release()
			do("warm").Release()
			if !equalInts(seen.store, []int64{9, 9}) || ovr.reads != before+2 {
				t.Errorf("after the reads came back: store saw %v, %d reads; want [9 9], 1", seen.store, ovr.reads-before-1)
			}
		})
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A batch group whose member's override read fails is decided one member
// at a time: the failing member by on_store_error (deny: 503), and the
// atomic batch is not asked.
func TestOverrideReadFailureInABatchGroup(t *testing.T) {
	f, err := policy.Parse("p.yaml", []byte(`version: 1
policies:
  - {name: a, routes: ["GET /p"], key: header:X-Key, strategy: durable, limit: 6, window: 1h, overrides: true, store_breaker: off}
  - {name: b, routes: ["GET /p"], key: header:X-Key, strategy: durable, limit: 6, window: 1h, store_breaker: off}
`))
	if err != nil {
		t.Fatal(err)
	}
	st := &store{mode: "ok"}
	ovr := &flakyOverrides{m: map[string]policy.Limits{}, err: errors.New("AccessDeniedException")}
	var events []edgelimit.Event
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)), Overrides: ovr,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observe: func(ev edgelimit.Event) { events = append(events, ev) },
		Limiters: func(*policy.Policy) (edgelimit.Limiter, error) { return &storeLimiter{s: st, batchKey: "t"}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	v := e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/p", SourceIP: "192.0.2.1",
		Header: limitertest.Headers{"X-Key": "k"}})
	defer v.Release()
	if v.Status != 503 {
		t.Errorf("status %d, want 503 (policy a fails closed)", v.Status)
	}
	if n := st.calls.Load(); n != 0 {
		t.Errorf("%d store calls, want none: b is only peeked once a failed closed (and cannot be)", n)
	}
	if len(events) != 1 || events[0].Policy != "a" || events[0].OverrideError == nil || !events[0].Degraded {
		t.Errorf("events %+v, want a's, degraded, with its override error", events)
	}
}
