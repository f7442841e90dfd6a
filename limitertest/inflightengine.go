package limitertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// InFlightEngine says how RunInFlightEngine serves its policies.
type InFlightEngine struct {
	// Strategy is the in-flight strategy as its package registers it
	// (inflight.Strategy): the suite's policy file names it. Required.
	Strategy *policy.Strategy
	// Handler puts an engine in front of a handler, as an adapter does
	// (a closure over middleware.Handler). Required.
	Handler func(e *edgelimit.Engine, next http.Handler) http.Handler
}

// RunInFlightEngine runs an in-flight policy through the root Engine and
// an adapter, over real HTTP, with limiters from backend: a handler that
// holds its request open holds a slot, a third concurrent request of one
// client with limit 2 gets a 429, and the slot comes back when the handler
// returns, however it ends (200, 500, a panic, a client that went away),
// or when another policy of the route denies the request (a refund). The
// route's other policy is the suite's own (the first request of a key is
// admitted, the rest denied), so the suite needs no second strategy.
func RunInFlightEngine(t *testing.T, backend Backend, cfg InFlightEngine) {
	t.Helper()
	if cfg.Strategy == nil || cfg.Handler == nil {
		t.Fatal("limitertest: RunInFlightEngine needs InFlightEngine.Strategy and Handler")
	}
	newServer := func(t *testing.T) *server { return newFlightServer(t, backend(t), cfg) }
	t.Run("HoldOpen", func(t *testing.T) { testHoldOpen(t, newServer(t)) })
	t.Run("FailedHandlers", func(t *testing.T) { testFailedHandlers(t, newServer(t)) })
	t.Run("ClientGone", func(t *testing.T) { testClientGone(t, newServer(t)) })
	t.Run("Refund", func(t *testing.T) { testEngineRefund(t, newServer(t)) })
	t.Run("Reservation", func(t *testing.T) { testEngineReservation(t, newServer(t)) })
}

// enginePolicies: speech is the in-flight policy under test; daily is the
// suite's quota of one request a key, which the engine asks on /both. A
// generous store_timeout, for real servers under load (slow, never wrong).
const enginePolicies = `version: 1
policies:
  - {name: speech, routes: ["POST /tts", "POST /both"], key: header:X-Api-Key, strategy: %[1]s, limit: 2, window: 15m, store_timeout: 20s}
  - {name: daily, routes: ["POST /both"], key: header:X-Api-Key, strategy: %[1]s, limit: 1, window: 1d}
`

// quotaPerKey admits the first Limit requests of each key and denies the
// rest, until the end of the test: the daily policy.
type quotaPerKey struct {
	name   string
	limit  int64
	window time.Duration
	mu     sync.Mutex
	n      map[string]int64
}

func (q *quotaPerKey) Allow(_ context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := edgelimit.Decision{Policy: q.name, Limit: q.limit, Window: q.window, Reset: q.window}
	if q.n[req.Key] < q.limit {
		q.n[req.Key]++
		d.Allowed, d.Remaining = true, q.limit-q.n[req.Key]
		return d, nil
	}
	d.RetryAfter = q.window
	return d, nil
}

// server is an httptest server of an engine and the adapter, whose handler
// does what each request's X-Do header says, once its gate (X-Gate)
// opens.
type server struct {
	t   *testing.T
	url string
	mu  sync.Mutex
	// gates are the open requests' gates, by X-Gate; entered receives each
	// gate's name as its request enters the handler.
	gates   map[string]chan struct{}
	entered chan string
	// finished receives a value after each Finish of the speech policy.
	finished chan error
}

// finishSignal wraps the in-flight limiter so the test learns when the
// engine has released a slot (the response may reach the client first).
type finishSignal struct {
	flightLimiter
	done chan<- error
}

func (f finishSignal) Finish(ctx context.Context, req edgelimit.Request, d edgelimit.Decision, status int, cost int64) error {
	err := f.flightLimiter.Finish(ctx, req, d, status, cost)
	select {
	case f.done <- err:
	default: // a test that stopped listening
	}
	return err
}

func newFlightServer(t *testing.T, newL NewLimiter, cfg InFlightEngine) *server {
	t.Helper()
	file, err := policy.Parse("policies.yaml", []byte(fmt.Sprintf(enginePolicies, cfg.Strategy.Name)))
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, gates: map[string]chan struct{}{}, entered: make(chan string, 64), finished: make(chan error, 64)}
	e, err := edgelimit.New(edgelimit.Config{
		Policies:   file,
		HashSecret: []byte(strings.Repeat("k", 32)),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			if p.Name == "daily" {
				return &quotaPerKey{name: p.Name, limit: p.Limit, window: p.Window, n: map[string]int64{}}, nil
			}
			l, err := newL(Spec{Policy: p}) // on the backend's fresh state
			if err != nil {
				return nil, err
			}
			fl, ok := l.(flightLimiter)
			if !ok {
				return nil, fmt.Errorf("%T is not an in-flight limiter: it must be a Finisher, a Refunder and a Peeker", l)
			}
			return finishSignal{fl, s.finished}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.Header.Get("X-Gate")
		s.mu.Lock()
		gate := s.gates[name]
		s.mu.Unlock()
		s.entered <- name
		switch r.Header.Get("X-Do") {
		case "panic":
			panic("the handler failed")
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
			return
		case "wait-for-client":
			<-r.Context().Done()
			return
		}
		if gate != nil {
			<-gate
		}
		_, _ = io.WriteString(w, "done")
	})
	srv := httptest.NewUnstartedServer(withHold(cfg.Handler(e, h)))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panics are the test's
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { // first: let every held request end, even after a failure
		s.mu.Lock()
		defer s.mu.Unlock()
		for name, g := range s.gates {
			select {
			case <-g:
			default:
				close(g)
			}
			delete(s.gates, name)
		}
	})
	s.url = srv.URL
	return s
}

// reply is one response, or the error that stood for it.
type reply struct {
	status int
	header http.Header
	body   string
	err    error
}

// send sends a request and returns a channel with its reply.
func (s *server) send(ctx context.Context, path, key, gate, do string) <-chan reply {
	return s.sendHold(ctx, path, key, gate, do, 0)
}

// sendHold sends a request whose application reserves hold slots of the
// speech policy (0: the policy's cost).
func (s *server) sendHold(ctx context.Context, path, key, gate, do string, hold int64) <-chan reply {
	if gate != "" {
		s.mu.Lock()
		if s.gates[gate] == nil {
			s.gates[gate] = make(chan struct{})
		}
		s.mu.Unlock()
	}
	out := make(chan reply, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, nil)
		if err != nil {
			out <- reply{err: err}
			return
		}
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("X-Gate", gate)
		req.Header.Set("X-Do", do)
		if hold > 0 {
			req.Header.Set("X-Hold", fmt.Sprint(hold))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- reply{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		out <- reply{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
	}()
	return out
}

// open lets gate's request leave the handler.
func (s *server) open(gate string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.gates[gate]; g != nil {
		close(g)
		delete(s.gates, gate)
	}
}

const wait = time.Minute // for a real server under load: slow, never wrong

func (s *server) waitEntered(want string) {
	s.t.Helper()
	select {
	case got := <-s.entered:
		if got != want {
			s.t.Fatalf("request %q entered the handler, want %q", got, want)
		}
	case <-time.After(wait):
		s.t.Fatalf("request %q never entered the handler", want)
	}
}

// waitFinished waits for the engine to release one slot.
func (s *server) waitFinished() {
	s.t.Helper()
	select {
	case err := <-s.finished:
		if err != nil {
			s.t.Fatalf("the release failed: %v", err)
		}
	case <-time.After(wait):
		s.t.Fatal("the engine never released the slot")
	}
}

func get(t *testing.T, c <-chan reply) reply {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(wait):
		t.Fatal("no reply")
	}
	return reply{}
}

func (s *server) want429(path, key string, violated ...string) reply {
	s.t.Helper()
	r := get(s.t, s.send(context.Background(), path, key, "", ""))
	if r.err != nil || r.status != http.StatusTooManyRequests {
		s.t.Fatalf("%s for %s: %d %v %s, want 429", path, key, r.status, r.err, r.body)
	}
	var p Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		s.t.Fatalf("429 body %q: %v", r.body, err)
	}
	if fmt.Sprint(p.ViolatedPolicies) != fmt.Sprint(violated) {
		s.t.Errorf("violated-policies = %v, want %v", p.ViolatedPolicies, violated)
	}
	return r
}

func testHoldOpen(t *testing.T, s *server) {
	ctx := context.Background()
	a := s.send(ctx, "/tts", "alice", "a", "")
	s.waitEntered("a")
	b := s.send(ctx, "/tts", "alice", "b", "")
	s.waitEntered("b")
	r := s.want429("/tts", "alice", "speech")
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1 (the retry hint: the leases are 15m away)", got)
	}
	if got, want := r.header.Get("RateLimit"), `"speech";r=0;t=1`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if got, want := r.header.Get("RateLimit-Policy"), `"speech";q=2;w=900`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	// Another client has its own slots.
	c := s.send(ctx, "/tts", "bob", "c", "")
	s.waitEntered("c")
	s.open("c")
	if r := get(t, c); r.status != 200 {
		t.Fatalf("bob: %d %v", r.status, r.err)
	}
	s.waitFinished()
	// One of alice's ends: the next is let in, and the one after is not.
	s.open("a")
	if r := get(t, a); r.status != 200 || r.body != "done" {
		t.Fatalf("first request: %d %q %v", r.status, r.body, r.err)
	}
	s.waitFinished()
	d := s.send(ctx, "/tts", "alice", "d", "")
	s.waitEntered("d")
	s.want429("/tts", "alice", "speech")
	s.open("b")
	s.open("d")
	for _, c := range []<-chan reply{b, d} {
		if r := get(t, c); r.status != 200 {
			t.Fatalf("%d %v", r.status, r.err)
		}
		s.waitFinished()
	}
}

// testFailedHandlers: a handler that answers 500 or panics still releases
// its slot (the middleware calls Verdict.Finish).
func testFailedHandlers(t *testing.T, s *server) {
	ctx := context.Background()
	for i, do := range []string{"500", "panic", "500", "panic"} {
		gate := fmt.Sprint("f", i)
		r := get(t, s.send(ctx, "/tts", "alice", gate, do))
		switch {
		case r.status == http.StatusTooManyRequests:
			t.Fatalf("request %d denied: the %d failed handlers before it kept their slots", i+1, i)
		case r.err == nil && r.status != 500:
			t.Fatalf("request %d (%s): %d %s", i+1, do, r.status, r.body)
		}
		s.waitEntered(gate)
		switch do {
		case "500":
			if r.status != 500 {
				t.Fatalf("%s: %d %v", do, r.status, r.err)
			}
		case "panic":
			if r.err == nil {
				t.Fatalf("panic: %d, want the connection dropped", r.status)
			}
		}
		s.waitFinished()
	}
	// Both slots are free: two held requests get in, a third does not.
	x := s.send(ctx, "/tts", "alice", "x", "")
	s.waitEntered("x")
	y := s.send(ctx, "/tts", "alice", "y", "")
	s.waitEntered("y")
	s.want429("/tts", "alice", "speech")
	s.open("x")
	s.open("y")
	get(t, x)
	get(t, y)
}

// testClientGone: a client that goes away mid-request does not keep its
// slot: the release runs after the request's context was cancelled.
func testClientGone(t *testing.T, s *server) {
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		c := s.send(ctx, "/tts", "alice", fmt.Sprint("g", i), "wait-for-client")
		s.waitEntered(fmt.Sprint("g", i))
		cancel()
		if r := get(t, c); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled request: %d %v", r.status, r.err)
		}
		s.waitFinished()
	}
	x := s.send(context.Background(), "/tts", "alice", "x", "")
	s.waitEntered("x")
	y := s.send(context.Background(), "/tts", "alice", "y", "")
	s.waitEntered("y")
	s.want429("/tts", "alice", "speech")
	s.open("x")
	s.open("y")
	get(t, x)
	get(t, y)
}

// testEngineRefund: on a route with an in-flight policy and a durable one,
// a request the durable policy denies gives its slot back.
func testEngineRefund(t *testing.T, s *server) {
	ctx := context.Background()
	// The one request of the day on /both, and a slot on /tts.
	r := get(t, s.send(ctx, "/both", "alice", "", ""))
	if r.status != 200 {
		t.Fatalf("first request on /both: %d %v %s", r.status, r.err, r.body)
	}
	s.waitEntered("")
	s.waitFinished()
	a := s.send(ctx, "/tts", "alice", "a", "")
	s.waitEntered("a")
	// Denied by daily: the slot speech took for it is refunded, three times.
	for range 3 {
		s.want429("/both", "alice", "daily")
	}
	// So one slot of two is still free.
	b := s.send(ctx, "/tts", "alice", "b", "")
	s.waitEntered("b")
	s.want429("/tts", "alice", "speech")
	s.open("a")
	s.open("b")
	get(t, a)
	get(t, b)
}
