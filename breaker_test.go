package edgelimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// store is a fake remote store for the breaker's tests: a call reaches it
// as an SDK call would (the context's Done first, so a call without budget
// never gets there), and it answers, fails or waits for the context,
// as the test sets. A request with an X-Memo header is answered from
// memory, without reaching for the store, as a deny cache does.
type store struct {
	mu    sync.Mutex
	mode  string // "ok", "fail", "hang"
	gate  chan struct{}
	calls atomic.Int64
	// slow holds the calls of requests with an X-Slow header (a hot item
	// many calls queue on) until the test closes it; then they fail, as
	// calls that missed their budget do.
	slow chan struct{}
}

func (s *store) slowCall(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
	}
	s.mu.Lock()
	slow := s.slow
	s.mu.Unlock()
	s.calls.Add(1)
	select {
	case <-slow:
	case <-ctx.Done():
		return ctx.Err()
	}
	return errors.New("store: the call missed its budget")
}

func (s *store) set(mode string) { s.mu.Lock(); s.mode = mode; s.mu.Unlock() }

func (s *store) call(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err() // as net/http does for a request whose context has ended
	default:
	}
	s.calls.Add(1)
	s.mu.Lock()
	mode, gate := s.mode, s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	switch mode {
	case "fail":
		return errors.New("store: 500 internal error")
	case "hang":
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// storeLimiter admits everything its store answers for.
type storeLimiter struct {
	s        *store
	batchKey string
	twin     *twin
}

func (l *storeLimiter) Allow(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
	if r.Header != nil && r.Header.Get("X-Memo") != "" {
		return edgelimit.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
	}
	if r.Header != nil && r.Header.Get("X-Waited") != "" {
		// Waited for another request's call (a deny cache's refresh) until
		// the budget ran out: the error a durable Counter returns then.
		<-ctx.Done()
		return edgelimit.Decision{}, fmt.Errorf("store: %w: %w", edgelimit.ErrWaited, ctx.Err())
	}
	if r.Header != nil && r.Header.Get("X-Slow") != "" {
		return edgelimit.Decision{}, l.s.slowCall(ctx)
	}
	if err := l.s.call(ctx); err != nil {
		return edgelimit.Decision{}, err
	}
	return edgelimit.Decision{Allowed: true, Limit: 10, Remaining: 7, Window: time.Minute}, nil
}

func (l *storeLimiter) BatchKey() string { return l.batchKey }

func (l *storeLimiter) AllowBatch(ctx context.Context, items []edgelimit.BatchItem) ([]edgelimit.Decision, error) {
	if err := l.s.call(ctx); err != nil {
		return nil, err
	}
	out := make([]edgelimit.Decision, len(items))
	for i := range out {
		out[i] = edgelimit.Decision{Allowed: true, Limit: 10, Remaining: 7}
	}
	return out, nil
}

func (l *storeLimiter) Local() (edgelimit.Limiter, error) { return l.twin, nil }

// twin is an in-process twin that hears what the store decided.
type twin struct {
	mu       sync.Mutex
	followed []edgelimit.Decision
	allows   int
}

func (t *twin) Allow(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.allows++
	return edgelimit.Decision{Allowed: false, Limit: 10, RetryAfter: time.Second, Reset: time.Second}, nil
}

func (t *twin) Follow(_ edgelimit.Request, d edgelimit.Decision) {
	t.mu.Lock()
	t.followed = append(t.followed, d)
	t.mu.Unlock()
}

// breakerFixture is an engine on fake stores with a clock the test moves.
type breakerFixture struct {
	t      *testing.T
	e      *edgelimit.Engine
	now    atomic.Int64
	mu     sync.Mutex
	events []edgelimit.Event
	states []edgelimit.BreakerEvent
	logs   bytes.Buffer
	twin   *twin
}

var t0 = time.Unix(1_700_000_000, 0)

func newBreakerFixture(t *testing.T, yaml string, stores map[string]*store, batchKeys map[string]string) *breakerFixture {
	t.Helper()
	f, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	fx := &breakerFixture{t: t, twin: &twin{}}
	fx.now.Store(t0.UnixNano())
	var logMu sync.Mutex
	e, err := edgelimit.New(edgelimit.Config{
		Policies:   f,
		HashSecret: []byte(strings.Repeat("k", 32)),
		Logger:     slog.New(slog.NewTextHandler(lockedWriter{&logMu, &fx.logs}, nil)),
		Now:        func() time.Time { return time.Unix(0, fx.now.Load()) },
		Observe: func(ev edgelimit.Event) {
			fx.mu.Lock()
			fx.events = append(fx.events, ev)
			fx.mu.Unlock()
		},
		ObserveBreaker: func(ev edgelimit.BreakerEvent) {
			fx.mu.Lock()
			fx.states = append(fx.states, ev)
			fx.mu.Unlock()
		},
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return &storeLimiter{s: stores[p.Name], batchKey: batchKeys[p.Name], twin: fx.twin}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	fx.e = e
	return fx
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (fx *breakerFixture) advance(d time.Duration) { fx.now.Add(int64(d)) }

func (fx *breakerFixture) get(path string) *edgelimit.Verdict {
	return fx.e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: path, SourceIP: "192.0.2.1"})
}

func (fx *breakerFixture) lastEvent() edgelimit.Event {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.events[len(fx.events)-1]
}

func (fx *breakerFixture) transitions() []string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	var out []string
	for _, ev := range fx.states {
		out = append(out, ev.Store+":"+ev.State.String())
	}
	return out
}

// TestBreakerOpensProbesAndCloses: three calls in a row fail and the
// breaker opens: the next requests are answered by on_store_error at once,
// with no store call and no store error, their reason breaker-open; after
// the cool-down one request probes (probes: 1), fails, and it opens again;
// the next probe succeeds and it closes.
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	s := &store{mode: "fail"}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: paid, routes: ["GET /paid"], key: ip, strategy: durable, limit: 10, window: 1m, on_store_error: deny,
     store_timeout: 30s, store_breaker: {failures: 3, cool_down: 2s, probes: 1}}
`, map[string]*store{"paid": s}, map[string]string{"paid": "table"})
	steps := []struct {
		advance   time.Duration
		mode      string
		status    int
		calls     int64 // store calls so far
		reason    string
		storeErr  bool
		wantState []string
	}{
		{0, "fail", 503, 1, "degraded", true, nil},
		{0, "fail", 503, 2, "degraded", true, nil},
		{0, "fail", 503, 3, "degraded", true, []string{"durable:open"}},
		{0, "fail", 503, 3, "breaker-open", false, nil},
		{1999 * time.Millisecond, "ok", 503, 3, "breaker-open", false, nil}, // still cooling down, though the store is back
		{time.Millisecond, "fail", 503, 4, "degraded", true, []string{"durable:open", "durable:half-open", "durable:open"}},
		{time.Second, "ok", 503, 4, "breaker-open", false, nil},
		{time.Second, "ok", 0, 5, "", false, []string{"durable:open", "durable:half-open", "durable:open", "durable:half-open", "durable:closed"}},
		{0, "fail", 503, 6, "degraded", true, nil}, // closed: counting again from zero
		{0, "ok", 0, 7, "", false, nil},
	}
	for i, st := range steps {
		fx.advance(st.advance)
		s.set(st.mode)
		v := fx.get("/paid")
		if v.Status != st.status {
			t.Fatalf("step %d: status %d, want %d", i, v.Status, st.status)
		}
		if got := s.calls.Load(); got != st.calls {
			t.Errorf("step %d: %d store calls, want %d", i, got, st.calls)
		}
		ev := fx.lastEvent()
		if ev.Reason != st.reason || (ev.StoreError != nil) != st.storeErr {
			t.Errorf("step %d: event reason %q, store error %v; want %q, error %v", i, ev.Reason, ev.StoreError, st.reason, st.storeErr)
		}
		if st.wantState != nil {
			if got := fx.transitions(); strings.Join(got, " ") != strings.Join(st.wantState, " ") {
				t.Errorf("step %d: breaker changes %v, want %v", i, got, st.wantState)
			}
		}
	}
	logs := fx.logs.String()
	for _, want := range []string{
		`level=WARN msg="edgelimit: store breaker open" store=durable policies=paid from=closed failures=3 cool_down_ms=2000 error="store: 500 internal error"`,
		`level=INFO msg="edgelimit: store breaker half-open" store=durable policies=paid from=open`,
		`level=INFO msg="edgelimit: store breaker closed" store=durable policies=paid from=half-open open_ms=4000`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs, "edgelimit: store failed"); n != 5 {
		t.Errorf("%d store-failed lines, want 5 (the calls that asked the store; none for the refused ones)", n)
	}
}

// TestBreakerOneProbeAtATime: 64 requests arrive together once the
// cool-down is over; one probes the store (which takes its time), the
// others are decided by on_store_error without waiting for it.
func TestBreakerOneProbeAtATime(t *testing.T) {
	s := &store{mode: "fail"}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: soft, routes: ["GET /soft"], key: ip, strategy: kv, limit: 10, window: 1m, on_store_error: allow, store_timeout: 10s,
     store_breaker: {failures: 1, probes: 1}}
`, map[string]*store{"soft": s}, nil)
	fx.get("/soft") // opens it
	fx.advance(time.Second)
	s.mu.Lock()
	s.mode, s.gate = "ok", make(chan struct{})
	s.mu.Unlock()
	var wg sync.WaitGroup
	var degraded atomic.Int64
	probeDone := make(chan struct{})
	wg.Add(64)
	for range 64 {
		go func() {
			defer wg.Done()
			v := fx.get("/soft")
			if !v.Allowed {
				t.Errorf("status %d, want fail-open admissions", v.Status)
			}
			if v.Decisions[0].Degraded {
				degraded.Add(1)
			} else {
				close(probeDone)
			}
		}()
	}
	// Every request but the probe is answered while the probe waits.
	// (The probe's call may reach the store after the others answered.)
	for degraded.Load() < 63 || s.calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	if got := s.calls.Load(); got != 2 {
		t.Errorf("%d store calls, want 2 (the one that opened it, one probe)", got)
	}
	close(s.gate)
	wg.Wait()
	<-probeDone
	if got := fx.transitions(); strings.Join(got, " ") != "kv/soft:open kv/soft:half-open kv/soft:closed" {
		t.Errorf("breaker changes %v", got)
	}
}

// TestBreakerIsPerStore: policies whose limiters share a store (one
// BatchKey) share its breaker; a policy on another store keeps asking its
// own. Answers from memory neither close it nor keep it from opening.
func TestBreakerIsPerStore(t *testing.T) {
	shared, other := &store{mode: "fail"}, &store{mode: "ok"}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: a, routes: ["GET /a"], key: ip, strategy: durable, limit: 10, window: 1m, store_timeout: 30s, store_breaker: {failures: 4}}
  - {name: b, routes: ["GET /b"], key: header:X-Key, strategy: durable, limit: 10, window: 1m, store_timeout: 30s, store_breaker: {failures: 4}}
  - {name: c, routes: ["GET /c"], key: ip, strategy: kv, limit: 10, window: 1m, store_timeout: 30s, store_breaker: {failures: 4}}
`, map[string]*store{"a": shared, "b": shared, "c": other}, map[string]string{"a": "table-1", "b": "table-1"})
	// Some of b's requests are answered from memory: their successes say
	// nothing about the store, and the failures of a and b in between add
	// up.
	fx.get("/a")
	for i, memo := range []string{"yes", "", "yes", "", "yes", ""} {
		v := fx.e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/b", SourceIP: "192.0.2.1",
			Header: limitertest.Headers(map[string]string{"X-Key": "k", "X-Memo": memo})})
		if (memo != "") != v.Allowed {
			t.Errorf("b %d: allowed %v", i, v.Allowed)
		}
	}
	if got := fx.transitions(); strings.Join(got, " ") != "durable:open" {
		t.Fatalf("breaker changes %v, want the shared store's open", got)
	}
	calls := shared.calls.Load()
	fx.get("/a")
	if shared.calls.Load() != calls {
		t.Error("a asked its store through b's open breaker")
	}
	for range 10 {
		if v := fx.get("/c"); v.Status != 0 || v.Decisions[0].Degraded {
			t.Fatalf("c on its own store: status %d degraded %v", v.Status, v.Decisions[0].Degraded)
		}
	}
	if other.calls.Load() != 10 {
		t.Errorf("c made %d store calls, want 10", other.calls.Load())
	}
}

// TestBreakerSharedStoreMustAgree: two policies on one store with
// different store_breaker are refused when the engine is built.
func TestBreakerSharedStoreMustAgree(t *testing.T) {
	f, err := policy.Parse("test.yaml", []byte(`version: 1
policies:
  - {name: a, routes: ["GET /a"], key: ip, strategy: durable, limit: 10, window: 1m, store_breaker: {failures: 3}}
  - {name: b, routes: ["GET /b"], key: ip, strategy: durable, limit: 10, window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)),
		Limiters: func(*policy.Policy) (edgelimit.Limiter, error) {
			return &storeLimiter{s: &store{}, batchKey: "one"}, nil
		}})
	want := `edgelimit: policies "a" and "b" share a store, but their store_breaker differ ({failures: 3, cool_down: 1s, probes: 3} and {failures: 5, cool_down: 1s, probes: 3}): set the same on both`
	if err == nil || err.Error() != want {
		t.Errorf("New: %v\nwant %s", err, want)
	}
}

// TestBreakerOff: store_breaker: off asks the store on every request.
func TestBreakerOff(t *testing.T) {
	s := &store{mode: "fail"}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: p, routes: ["GET /p"], key: ip, strategy: durable, limit: 10, window: 1m, store_breaker: off}
`, map[string]*store{"p": s}, nil)
	for range 20 {
		fx.get("/p")
	}
	if s.calls.Load() != 20 || len(fx.transitions()) != 0 {
		t.Errorf("%d store calls, changes %v; want 20 and none", s.calls.Load(), fx.transitions())
	}
}

// TestBreakerClientGoneIsNoFailure: calls cut short because the client
// went away say nothing about the store.
func TestBreakerClientGoneIsNoFailure(t *testing.T) {
	s := &store{mode: "hang"}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: p, routes: ["GET /p"], key: ip, strategy: durable, limit: 10, window: 1m, store_timeout: 30s, store_breaker: {failures: 1}}
`, map[string]*store{"p": s}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for s.calls.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	fx.e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/p", SourceIP: "192.0.2.1"})
	if got := fx.transitions(); len(got) != 0 {
		t.Errorf("breaker changes %v after a client went away, want none", got)
	}
}

// TestBreakerLocalTwin: while the breaker is open an on_store_error: local
// policy is decided by its twin at once; the twin heard every decision the
// store made before.
func TestBreakerLocalTwin(t *testing.T) {
	s := &store{mode: "ok"}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: search, routes: ["GET /search"], key: ip, strategy: durable, limit: 10, window: 1m, on_store_error: local,
     store_timeout: 30s, store_breaker: {failures: 2}}
`, map[string]*store{"search": s}, nil)
	fx.get("/search")
	fx.get("/search")
	s.set("fail")
	fx.get("/search")
	fx.get("/search")
	for range 50 {
		if v := fx.get("/search"); v.Status != 429 || !v.Decisions[0].Degraded {
			t.Fatalf("twin's denial: status %d", v.Status)
		}
	}
	if s.calls.Load() != 4 {
		t.Errorf("%d store calls, want 4 (2 answered, 2 failed that opened it)", s.calls.Load())
	}
	fx.twin.mu.Lock()
	defer fx.twin.mu.Unlock()
	if len(fx.twin.followed) != 2 || fx.twin.followed[0].Remaining != 7 {
		t.Errorf("twin followed %+v, want the two decisions the store made", fx.twin.followed)
	}
	if fx.twin.allows != 52 {
		t.Errorf("twin decided %d, want 52", fx.twin.allows)
	}
}

// TestBreakerBatch: a batch of policies on one store goes through its
// breaker as one call.
func TestBreakerBatch(t *testing.T) {
	s := &store{mode: "fail"}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: a, routes: ["GET /x"], key: ip, strategy: durable, limit: 10, window: 1m, store_breaker: {failures: 2}}
  - {name: b, routes: ["GET /x"], key: ip, strategy: durable, limit: 10, window: 1m, store_breaker: {failures: 2}}
`, map[string]*store{"a": s, "b": s}, map[string]string{"a": "t", "b": "t"})
	for range 5 {
		if v := fx.get("/x"); v.Status != 503 {
			t.Fatalf("status %d, want 503", v.Status)
		}
	}
	if s.calls.Load() != 2 {
		t.Errorf("%d store calls, want 2 (one batch each, until it opened)", s.calls.Load())
	}
}

// failingOverrides is an override store whose every read reaches for the
// store and fails.
type failingOverrides struct{ s *store }

func (o failingOverrides) Override(ctx context.Context, _, _ string) (policy.Limits, bool, error) {
	if err := o.s.call(ctx); err != nil {
		return policy.Limits{}, false, err
	}
	return policy.Limits{}, false, nil
}

func (failingOverrides) SetOverride(context.Context, string, string, policy.Limits, time.Time) error {
	return nil
}

func (failingOverrides) DeleteOverride(context.Context, string, string) error { return nil }

// TestBreakerOverrideStore: the override lookups of new keys go through a
// breaker of their own, so that a dead override store stops taxing every
// new client's first request (on_store_error decides them: allow admits).
func TestBreakerOverrideStore(t *testing.T) {
	f, err := policy.Parse("test.yaml", []byte(`version: 1
policies:
  - {name: p, routes: ["GET /p"], key: header:X-Key, strategy: durable, limit: 10, window: 1m, overrides: true,
     on_store_error: allow, store_timeout: 30s, store_breaker: {failures: 2}}
`))
	if err != nil {
		t.Fatal(err)
	}
	ov := &store{mode: "fail"}
	var states []string
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)),
		Logger:         slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)),
		Overrides:      failingOverrides{ov},
		ObserveBreaker: func(ev edgelimit.BreakerEvent) { states = append(states, ev.Store+":"+ev.State.String()) },
		Limiters: func(*policy.Policy) (edgelimit.Limiter, error) {
			return &storeLimiter{s: &store{mode: "ok"}, batchKey: "t"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		v := e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/p", SourceIP: "192.0.2.1",
			Header: limitertest.Headers(map[string]string{"X-Key": fmt.Sprint("client-", i)})})
		if !v.Allowed {
			t.Fatalf("request %d: status %d; on_store_error: allow admits", i, v.Status)
		}
	}
	if ov.calls.Load() != 2 || strings.Join(states, " ") != "overrides:open" {
		t.Errorf("%d override reads, breaker changes %v; want 2 and the override store's open", ov.calls.Load(), states)
	}
}

// TestBreakerDoesNotCountWaits: requests that waited for another request's
// store call until their budget ran out (ErrWaited) are decided by
// on_store_error, but do not open the breaker, however many: the call
// they waited for counts once, with its own result. Three calls of their
// own that fail do open it.
func TestBreakerDoesNotCountWaits(t *testing.T) {
	s := &store{mode: "fail"}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: paid, routes: ["GET /paid"], key: ip, strategy: durable, limit: 10, window: 1m, on_store_error: deny,
     store_timeout: 1ms, store_breaker: {failures: 3, cool_down: 2s, probes: 1}}
`, map[string]*store{"paid": s}, map[string]string{"paid": "table"})
	waited := limitertest.Headers(map[string]string{"X-Waited": "1"})
	for i := range 10 {
		v := fx.e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/paid", SourceIP: "192.0.2.1", Header: waited})
		if v.Status != 503 {
			t.Fatalf("waited request %d: status %d, want 503 (on_store_error: deny decides it)", i, v.Status)
		}
		if ev := fx.lastEvent(); ev.Reason != "degraded" || ev.StoreError == nil || !errors.Is(ev.StoreError, edgelimit.ErrWaited) {
			t.Errorf("waited request %d: reason %q, store error %v; want degraded with ErrWaited", i, ev.Reason, ev.StoreError)
		}
	}
	if got := fx.transitions(); len(got) != 0 {
		t.Fatalf("breaker changes %v after 10 waits, want none", got)
	}
	for i := range 3 {
		fx.get("/paid")
		if got := fx.transitions(); (i < 2) != (len(got) == 0) {
			t.Fatalf("after %d failed calls of its own: breaker changes %v", i+1, got)
		}
	}
}
