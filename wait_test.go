package edgelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// waitRig is an engine with max_delay policies on a memory store, its
// clock and its Sleep injected: a wait moves the clock (or is cut short
// by cut, after advancing the clock by cutAfter), so no test sleeps.
type waitRig struct {
	t        *testing.T
	e        *edgelimit.Engine
	clock    *limitertest.Clock
	t0       time.Time // where the clock starts: waitT0
	mu       sync.Mutex
	slept    []time.Duration
	cut      error
	cutAfter time.Duration
	events   []edgelimit.Event
}

const waitPolicies = `version: 1
policies:
  - name: paced
    routes: ["GET /a"]
    key: ip
    strategy: durable
    algorithm: gcra
    limit: 1
    window: 1s
    burst: 1
    max_delay: 2s
  - name: daily
    routes: ["GET /a"]
    key: ip
    strategy: durable
    limit: 100
    window: 1d
`

// waitT0 is the rig's first instant: an hour ahead of the wall clock, so
// that a request's deadline in the rig's clock (a Lambda invocation's) is
// a real one a store call's budget honours too (kv's memory KV refuses a
// call whose context has ended), away from midnight (daily's window).
func waitT0() time.Time {
	t := time.Now().Add(time.Hour).Truncate(time.Minute)
	if t.Add(time.Minute).Day() != t.Day() {
		t = t.Add(2 * time.Minute)
	}
	return t
}

// kvWaitPolicies is waitPolicies with paced a kv bucket: the same turns.
var kvWaitPolicies = strings.Replace(waitPolicies, "    strategy: durable\n    algorithm: gcra\n", "    strategy: kv\n", 1)

// forEachWaitFile runs f on waitPolicies and kvWaitPolicies: a durable
// gcra and a kv bucket of the same rate, burst and max_delay wait alike.
func forEachWaitFile(t *testing.T, f func(t *testing.T, file string)) {
	t.Run("durable", func(t *testing.T) { f(t, waitPolicies) })
	t.Run("kv", func(t *testing.T) { f(t, kvWaitPolicies) })
}

func newWaitRig(t *testing.T, file string, margin time.Duration) *waitRig {
	t.Helper()
	f, err := policy.Parse("p.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	r := &waitRig{t: t, t0: waitT0()}
	r.clock = limitertest.NewClock(r.t0)
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	kv := kvbucket.NewMemory(kvbucket.MemoryConfig{Now: r.clock.Now})
	r.e, err = edgelimit.New(edgelimit.Config{
		Policies:   f,
		HashSecret: []byte(strings.Repeat("s", 32)),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:        r.clock.Now,
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			if p.Strategy == kvbucket.Strategy {
				return kvbucket.New(kvbucket.Config{Policy: p, KV: kv})
			}
			return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
		},
		Observe: func(ev edgelimit.Event) {
			r.mu.Lock()
			ev.Context = nil
			r.events = append(r.events, ev)
			r.mu.Unlock()
		},
		Sleep: func(ctx context.Context, d time.Duration) error {
			r.mu.Lock()
			r.slept = append(r.slept, d)
			cut, after := r.cut, r.cutAfter
			r.mu.Unlock()
			if cut != nil {
				r.clock.Advance(after)
				return cut
			}
			r.clock.Advance(d)
			return nil
		},
		WaitMargin: margin,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// do decides one request and returns its status, the waits it slept, its
// header names and the events of its policies.
func (r *waitRig) do(ctx context.Context) (v *edgelimit.Verdict, slept []time.Duration, events []edgelimit.Event) {
	r.mu.Lock()
	r.slept, r.events = nil, nil
	r.mu.Unlock()
	v = r.e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/a", SourceIP: "203.0.113.9"})
	r.mu.Lock()
	defer r.mu.Unlock()
	return v, r.slept, r.events
}

func eventOf(evs []edgelimit.Event, policy string) edgelimit.Event {
	for _, ev := range evs {
		if ev.Policy == policy {
			return ev
		}
	}
	return edgelimit.Event{}
}

func headerNames(v *edgelimit.Verdict) string {
	var names []string
	for _, f := range v.Header() {
		names = append(names, f.Name)
	}
	return strings.Join(names, ",")
}

// TestMaxDelayWaitsThenServes: requests beyond the rate wait for their
// turns, one emission interval apart, and are served; one beyond
// max_delay is denied at once. The client sees the same header fields
// whether it waited or not; metrics see the wait.
func TestMaxDelayWaitsThenServes(t *testing.T) {
	forEachWaitFile(t, func(t *testing.T, file string) {
		r := newWaitRig(t, file, 0)
		ctx := context.Background()
		v, slept, _ := r.do(ctx)
		if !v.Allowed || len(slept) != 0 {
			t.Fatalf("first request: allowed %v, slept %v; want served at once", v.Allowed, slept)
		}
		immediate := headerNames(v)
		v.Release()
		// The clock stands still between requests: each finds the turns the
		// ones before it reserved. (The rig's Sleep moves the clock: set it
		// back, as if the requests had come at once.)
		for i, want := range []time.Duration{time.Second, 2 * time.Second} {
			r.clock.Set(r.t0)
			v, slept, evs := r.do(ctx)
			if !v.Allowed || len(slept) != 1 || slept[0] != want {
				t.Fatalf("request %d: allowed %v, slept %v; want served after %s", i+2, v.Allowed, slept, want)
			}
			if got := headerNames(v); got != immediate {
				t.Errorf("request %d: header fields %s, want those of a request served at once (%s): a wait is never shown", i+2, got, immediate)
			}
			if ev := eventOf(evs, "paced"); ev.Wait != want || !ev.Allowed || ev.Reason != "" {
				t.Errorf("request %d: event %+v, want allowed with Wait %s", i+2, ev, want)
			}
			if ev := eventOf(evs, "daily"); ev.Wait != 0 {
				t.Errorf("request %d: daily's event has Wait %s; only the policy that delayed waited", i+2, ev.Wait)
			}
			v.Release()
		}
		r.clock.Set(r.t0)
		v, slept, _ = r.do(ctx)
		if v.Allowed || v.Status != 429 || len(slept) != 0 {
			t.Fatalf("fourth request: status %d, slept %v; want 429 at once (its turn is 3s away, max_delay 2s)", v.Status, slept)
		}
		v.Release()
	})
}

// TestMaxDelayCutShort: a wait that the request's context ends gives back
// every policy's units and answers as the delaying policy's 429, its
// Retry-After the time its turn was still away; a wait the deadline would
// not leave room for (less than WaitMargin after it) is not begun.
func TestMaxDelayCutShort(t *testing.T) {
	forEachWaitFile(t, func(t *testing.T, file string) {
		r := newWaitRig(t, file, 0)
		ctx := context.Background()
		r.do(ctx) // the first: at once
		r.clock.Set(r.t0)
		r.cut, r.cutAfter = context.Canceled, 300*time.Millisecond
		v, slept, evs := r.do(ctx)
		if v.Allowed || v.Status != 429 || len(slept) != 1 {
			t.Fatalf("cut wait: allowed %v, status %d, slept %v; want a 429 after one wait", v.Allowed, v.Status, slept)
		}
		var p limitertest.Problem
		if err := json.Unmarshal(v.Body, &p); err != nil {
			t.Fatal(err)
		}
		if len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "paced" || p.RetryAfter != 1 {
			t.Errorf("problem %+v: want violated [paced], retry-after 1 (its turn was 0.7s away, rounded up)", p)
		}
		ev := eventOf(evs, "paced")
		if ev.Allowed || ev.Reason != "wait-cut" || ev.Wait != 300*time.Millisecond {
			t.Errorf("paced's event %+v: want denied, Reason wait-cut, Wait 300ms", ev)
		}
		if d := eventOf(evs, "daily"); !d.Refunded {
			t.Errorf("daily's event %+v: want refunded (the request was not served)", d)
		}
		v.Release()
		// The turn came back: the next request (at the cut's instant) gets
		// the same turn, 0.7s away, and daily counts two requests, not three.
		r.cut = nil
		v, slept, _ = r.do(ctx)
		if !v.Allowed || len(slept) != 1 || slept[0] != 700*time.Millisecond {
			t.Fatalf("after the cut: allowed %v, slept %v; want served after 700ms (the turn given back)", v.Allowed, slept)
		}
		if got := v.Header(); !strings.Contains(fieldsString(got), `"daily";r=98`) {
			t.Errorf("after the cut: %s; want daily r=98 (the cut request given back)", fieldsString(got))
		}
		v.Release()

		// A deadline 1.5s away with the default margin (1s) leaves no room for
		// a turn 1s away: a 429 at once, nothing slept, the turn given back.
		r.clock.Set(r.t0.Add(10 * time.Second))
		r.do(ctx) // idle again: at once
		dctx, cancel := context.WithDeadline(ctx, r.clock.Now().Add(1500*time.Millisecond))
		defer cancel()
		v, slept, evs = r.do(dctx)
		if v.Status != 429 || len(slept) != 0 || eventOf(evs, "paced").Reason != "wait-cut" {
			t.Fatalf("deadline 1.5s away: status %d, slept %v, event %+v; want a 429 without a wait", v.Status, slept, eventOf(evs, "paced"))
		}
		v.Release()
		dctx, cancel = context.WithDeadline(ctx, r.clock.Now().Add(2500*time.Millisecond))
		defer cancel()
		v, slept, _ = r.do(dctx)
		if !v.Allowed || len(slept) != 1 || slept[0] != time.Second {
			t.Fatalf("deadline 2.5s away: allowed %v, slept %v; want served after 1s (the turn the cut gave back)", v.Allowed, slept)
		}
		v.Release()
	})
}

// TestMaxDelayWaitMargin: WaitMargin is the room a deadline must leave.
func TestMaxDelayWaitMargin(t *testing.T) {
	forEachWaitFile(t, func(t *testing.T, file string) {
		r := newWaitRig(t, file, 100*time.Millisecond)
		ctx := context.Background()
		r.do(ctx)
		r.clock.Set(r.t0)
		dctx, cancel := context.WithDeadline(ctx, r.clock.Now().Add(1200*time.Millisecond))
		defer cancel()
		if v, slept, _ := r.do(dctx); !v.Allowed || len(slept) != 1 {
			t.Fatalf("deadline 1.2s away, margin 100ms, turn 1s away: allowed %v, slept %v; want served", v.Allowed, slept)
		}
	})
}

// TestSleepDefault: the default Sleep returns once d has passed, or the
// context's error at once when the context has ended.
func TestSleepDefault(t *testing.T) {
	f, err := policy.Parse("p.yaml", []byte(waitPolicies))
	if err != nil {
		t.Fatal(err)
	}
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("s", 32)),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
		}})
	if err != nil {
		t.Fatal(err)
	}
	in := &edgelimit.Input{Method: "GET", Path: "/a", SourceIP: "203.0.113.9"}
	e.Decide(context.Background(), in).Release()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v := e.Decide(ctx, in) // its turn is ~1s away; the context has ended
	if v.Status != 429 {
		t.Errorf("a wait in an ended context: status %d, want 429", v.Status)
	}
	v.Release()
	if err := edgelimit.SleepTimer(context.Background(), time.Nanosecond); err != nil {
		t.Errorf("SleepTimer(1ns) = %v, want nil", err)
	}
	if err := edgelimit.SleepTimer(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("SleepTimer in an ended context = %v, want context.Canceled at once", err)
	}
}

func fieldsString(fs []edgelimit.Field) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.Name + ": " + f.Value + "\n")
	}
	return b.String()
}
