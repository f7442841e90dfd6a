package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/signedwindow"
)

var t0 = time.Unix(1_700_000_000, 0)

const testPolicies = `
version: 1
policies:
  - name: tts
    routes: ["POST /tts"]
    key: ip
    strategy: signed
    limit: 5
    window: 1m
    proof_of_work: {bits: 8, ttl: 10s}
  - name: search
    routes: ["GET /search"]
    key: ip
    strategy: signed
    limit: 3
    window: 1m
  - name: both-a
    routes: ["POST /both"]
    key: ip
    strategy: signed
    limit: 4
    window: 1m
    proof_of_work: {bits: 6, ttl: 10s}
  - name: both-b
    routes: ["POST /both"]
    key: ip
    strategy: signed
    limit: 4
    window: 1m
    proof_of_work: {bits: 7, ttl: 10s}
  - name: gated
    routes: ["GET /gated"]
    key: ip
    strategy: signed
    limit: 5
    window: 1m
    proof_of_work: {bits: 8, ttl: 10s}
  - name: gate
    routes: ["GET /gated"]
    key: ip
    strategy: kv
    limit: 100
    window: 1m
`

// clock is the fake time shared by the server and the client.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// server is a real HTTP server running the engine with signedwindow
// limiters, translating net/http itself (no middleware package).
type server struct {
	*httptest.Server
	clock    *clock
	handled  atomic.Int64 // requests that reached the handler
	gateOpen atomic.Bool
}

func newServer(t *testing.T) *server {
	t.Helper()
	file, err := policy.Parse("test.yaml", []byte(testPolicies))
	if err != nil {
		t.Fatal(err)
	}
	s := &server{clock: &clock{t: t0}}
	s.gateOpen.Store(true)
	keys := signedwindow.EphemeralKeyRing()
	signed := signedwindow.NewFactory(signedwindow.Config{Keys: keys, Now: s.clock.Now})
	e, err := edgelimit.New(edgelimit.Config{
		Policies:   file,
		HashSecret: []byte("client-test-hash-secret-0123456789ab"),
		Now:        s.clock.Now,
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			if p.Strategy == signedwindow.Strategy {
				return signed(p)
			}
			return limitertest.LimiterFunc(func(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
				return edgelimit.Decision{Allowed: s.gateOpen.Load(), Limit: 100, Window: time.Minute, Remaining: 50, RetryAfter: 2 * time.Second}, nil
			}), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		v := e.Decide(r.Context(), &edgelimit.Input{Method: r.Method, Path: r.URL.EscapedPath(), SourceIP: ip, Header: r.Header})
		for _, f := range v.Header() {
			w.Header().Add(f.Name, f.Value)
		}
		if !v.Allowed {
			w.WriteHeader(v.Status)
			w.Write(v.Body)
			return
		}
		body, _ := io.ReadAll(r.Body)
		s.handled.Add(1)
		w.Write(append([]byte("ok "), body...))
	}))
	t.Cleanup(s.Close)
	return s
}

// counting wraps a RoundTripper and counts what reaches the server.
type counting struct {
	base     http.RoundTripper
	requests atomic.Int64
	status   sync.Map // int -> *atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		n, _ := c.status.LoadOrStore(resp.StatusCode, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	return resp, err
}

func (c *counting) count(status int) int64 {
	if n, ok := c.status.Load(status); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

type harness struct {
	srv    *server
	tr     *Transport
	wire   *counting
	solves atomic.Int64
	events []Event
	mu     sync.Mutex
}

func newHarness(t *testing.T) *harness {
	h := &harness{srv: newServer(t)}
	h.wire = &counting{base: h.srv.Client().Transport}
	h.tr = &Transport{
		Base: h.wire,
		Now:  h.srv.clock.Now,
		Solve: func(ctx context.Context, ch string) (string, error) {
			h.solves.Add(1)
			return pow.Solve(ctx, ch)
		},
		Sleep: func(ctx context.Context, d time.Duration) error {
			h.srv.clock.Add(d) // waiting moves the fake clock, nothing sleeps
			return ctx.Err()
		},
		Observe: func(e Event) {
			h.mu.Lock()
			h.events = append(h.events, e)
			h.mu.Unlock()
		},
	}
	return h
}

func (h *harness) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.tr.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *harness) kinds() []EventKind {
	h.mu.Lock()
	defer h.mu.Unlock()
	var k []EventKind
	for _, e := range h.events {
		k = append(k, e.Kind)
	}
	return k
}

// TestSpendsExactlyLimitPerProof is the end-to-end property: the
// client spends exactly `limit` requests per window per proof.
func TestSpendsExactlyLimitPerProof(t *testing.T) {
	h := newHarness(t)
	const limit, n = 5, 23
	allowedSinceSolve := []int{}
	for i := range n {
		before := h.solves.Load()
		status, body := h.do(t, "POST", "/tts", `{"text":"hi"}`)
		if status != 200 || body != `ok {"text":"hi"}` {
			t.Fatalf("request %d: %d %q, want 200 with the body echoed", i, status, body)
		}
		if h.solves.Load() != before || len(allowedSinceSolve) == 0 {
			allowedSinceSolve = append(allowedSinceSolve, 0)
		}
		allowedSinceSolve[len(allowedSinceSolve)-1]++
		h.srv.clock.Add(time.Second)
	}
	if got, want := h.solves.Load(), int64((n+limit-1)/limit); got != want {
		t.Errorf("solved %d challenges for %d requests, want %d", got, n, want)
	}
	for i, a := range allowedSinceSolve[:len(allowedSinceSolve)-1] {
		if a != limit {
			t.Errorf("proof %d bought %d requests, want exactly %d (all: %v)", i, a, limit, allowedSinceSolve)
		}
	}
	if h.srv.handled.Load() != n || h.wire.count(429) != h.solves.Load() || h.wire.count(200) != n {
		t.Errorf("server saw %d 200s, %d 429s, handler ran %d times; want %d, %d, %d",
			h.wire.count(200), h.wire.count(429), h.srv.handled.Load(), n, h.solves.Load(), n)
	}
	// A new window after the token expires: one more proof.
	h.srv.clock.Add(2 * time.Minute)
	before := h.solves.Load()
	if status, _ := h.do(t, "POST", "/tts", "x"); status != 200 || h.solves.Load() != before+1 {
		t.Errorf("after the window: %d, %d solves, want 200 after one solve", status, h.solves.Load()-before)
	}
}

func TestFreeWindowHonoursRetryAfter(t *testing.T) {
	h := newHarness(t)
	for i := range 3 {
		if status, _ := h.do(t, "GET", "/search", ""); status != 200 {
			t.Fatalf("request %d: %d", i, status)
		}
	}
	start := h.srv.clock.Now()
	if status, _ := h.do(t, "GET", "/search", ""); status != 200 {
		t.Fatalf("4th request: %d, want 200 after waiting for Retry-After", status)
	}
	if waited := h.srv.clock.Now().Sub(start); waited != time.Minute {
		t.Errorf("waited %v, want the window's remaining minute", waited)
	}
	if h.solves.Load() != 0 {
		t.Errorf("solved %d challenges on a policy without proof of work", h.solves.Load())
	}

	// NoWait and MaxWait return the 429 instead.
	for _, tr := range []*Transport{{NoWait: true}, {MaxWait: 10 * time.Second}} {
		tr.Base, tr.Jar, tr.Now = h.wire, h.tr.Tokens(), h.srv.clock.Now
		tr.Sleep = func(context.Context, time.Duration) error { t.Error("slept"); return nil }
		h.srv.clock.Add(time.Minute)
		for range 3 {
			h.do(t, "GET", "/search", "") // a new window, spent
		}
		req, _ := http.NewRequest("GET", h.srv.URL+"/search", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
			t.Errorf("NoWait=%v MaxWait=%v: %d, want the 429 with Retry-After", tr.NoWait, tr.MaxWait, resp.StatusCode)
		}
	}
}

func TestSeveralProofOfWorkPolicies(t *testing.T) {
	h := newHarness(t)
	for i := range 4 {
		if status, _ := h.do(t, "POST", "/both", "b"); status != 200 {
			t.Fatalf("request %d: %d", i, status)
		}
	}
	if h.solves.Load() != 2 {
		t.Errorf("solved %d challenges, want 2 (one per policy)", h.solves.Load())
	}
	if status, _ := h.do(t, "POST", "/both", "b"); status != 200 || h.solves.Load() != 4 {
		t.Errorf("5th request: %d after %d solves, want 200 after 2 more", status, h.solves.Load())
	}
}

// TestDenialByAnotherPolicyKeepsTheProof: the gate denies with Retry-After;
// the signed policy refunds, so the retry after the wait needs no new proof.
func TestDenialByAnotherPolicyKeepsTheProof(t *testing.T) {
	h := newHarness(t)
	h.srv.gateOpen.Store(false)
	h.tr.Sleep = func(ctx context.Context, d time.Duration) error {
		h.srv.clock.Add(d)
		h.srv.gateOpen.Store(true)
		return nil
	}
	if status, _ := h.do(t, "GET", "/gated", ""); status != 200 {
		t.Fatalf("%d, want 200", status)
	}
	if h.solves.Load() != 1 {
		t.Errorf("solved %d challenges, want 1", h.solves.Load())
	}
	want := []EventKind{EventChallenge, EventSolved, EventWait, EventToken}
	if got := h.kinds(); !equalKinds(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	for i := range 4 {
		if status, _ := h.do(t, "GET", "/gated", ""); status != 200 {
			t.Fatalf("request %d: %d", i, status)
		}
	}
	if h.solves.Load() != 1 {
		t.Errorf("solved %d challenges for 5 requests, want 1", h.solves.Load())
	}
}

func equalKinds(a, b []EventKind) bool {
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

func TestCancelDuringSolve(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	h.tr.Solve = func(ctx context.Context, ch string) (string, error) {
		cancel() // the caller gives up while we solve
		<-ctx.Done()
		return "", ctx.Err()
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/tts", strings.NewReader("x"))
	_, err := h.tr.Client().Do(req)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do = %v, want context.Canceled", err)
	}
	// The real solver honours ctx too.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	tr := &Transport{Base: h.wire}
	req, _ = http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/tts", nil)
	if _, err := tr.Client().Do(req); !errors.Is(err, context.Canceled) {
		t.Errorf("Do with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestBoundedRetries(t *testing.T) {
	ch := "AQgBi8_ljxDZh37ObTaKrBpvQZ4zuqlxkip3LJbI4BY2GpdB" // a real 8-bit challenge, for a server that never accepts
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Edgelimit-Challenge", ch)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(429)
	}))
	defer srv.Close()
	var solves atomic.Int64
	var events []EventKind
	tr := &Transport{
		MaxRetries: 2,
		Solve:      func(context.Context, string) (string, error) { solves.Add(1); return ch + ".AAAAAAAAAAA", nil },
		Observe:    func(e Event) { events = append(events, e.Kind) },
	}
	resp, err := tr.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || hits.Load() != 3 || solves.Load() != 2 || events[len(events)-1] != EventGiveUp {
		t.Errorf("got %d after %d requests and %d solves (events %v); want the 429 after 3 requests, 2 solves, give-up",
			resp.StatusCode, hits.Load(), solves.Load(), events)
	}
}

func TestWhenNotToSolve(t *testing.T) {
	h := newHarness(t)
	// A body that cannot be sent twice: the challenge comes back as a 429.
	req, _ := http.NewRequest("POST", h.srv.URL+"/tts", io.NopCloser(strings.NewReader("x")))
	resp, err := h.tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Edgelimit-Challenge") == "" || h.solves.Load() != 0 {
		t.Errorf("unreplayable body: %d after %d solves, want the challenge back unsolved", resp.StatusCode, h.solves.Load())
	}
	// A challenge above MaxBits.
	h.tr.MaxBits = 7
	req, _ = http.NewRequest("POST", h.srv.URL+"/tts", bytes.NewReader([]byte("x")))
	resp, err = h.tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || h.solves.Load() != 0 {
		t.Errorf("8-bit challenge with MaxBits 7: %d after %d solves, want the 429 unsolved", resp.StatusCode, h.solves.Load())
	}
}

func TestDoesNotModifyTheRequest(t *testing.T) {
	h := newHarness(t)
	req, _ := http.NewRequest("POST", h.srv.URL+"/tts", bytes.NewReader([]byte("x")))
	req.Header.Set("X-Mine", "1")
	resp, err := h.tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(req.Header) != 1 || req.Header.Get("X-Mine") != "1" {
		t.Errorf("request headers changed to %v", req.Header)
	}
	// A token the caller sets is sent as is, not replaced by the jar's.
	req, _ = http.NewRequest("POST", h.srv.URL+"/tts", bytes.NewReader([]byte("x")))
	req.Header.Set("Edgelimit-Token", "mine")
	var sent string
	tr := &Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r.Header.Get("Edgelimit-Token")
		return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	}), Jar: h.tr.Tokens()}
	resp, _ = tr.RoundTrip(req)
	resp.Body.Close()
	if sent != "mine" {
		t.Errorf("sent token %q, want the caller's", sent)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
