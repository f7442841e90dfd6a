package durablecounter_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// faultPolicies guard two routes with the same durable policies, one
// failing open and one failing closed, of two algorithms each, and a third
// whose in-process twin decides while the store fails.
const faultPolicies = `version: 1
policies:
  - {name: open-window, routes: ["GET /open"], key: header:X-Api-Key, strategy: durable, algorithm: sliding-window, limit: 5, window: 1h, on_store_error: allow}
  - {name: open-gcra, routes: ["GET /open"], key: header:X-Api-Key, strategy: durable, algorithm: gcra, limit: 5, window: 1h, on_store_error: allow}
  - {name: closed-fixed, routes: ["GET /closed"], key: header:X-Api-Key, strategy: durable, algorithm: fixed-window, limit: 5, window: 1h, on_store_error: deny}
  - {name: closed-log, routes: ["GET /closed"], key: header:X-Api-Key, strategy: durable, algorithm: sliding-log, limit: 5, window: 1h, on_store_error: deny}
  - {name: local-gcra, routes: ["GET /local"], key: header:X-Api-Key, strategy: durable, algorithm: gcra, limit: 5, window: 1h, on_store_error: local}
`

// faultEngine is an engine over Counters on store, recording every
// policy decision's event.
type faultEngine struct {
	*edgelimit.Engine
	mu     sync.Mutex
	events []edgelimit.Event
}

func newFaultEngine(t *testing.T, store durablecounter.Store, now func() time.Time) *faultEngine {
	t.Helper()
	return newFaultEngineBudget(t, store, now, "")
}

// newFaultEngineBudget builds the engine with every policy's store_timeout
// set to budget ("" keeps the default, 100 ms).
func newFaultEngineBudget(t *testing.T, store durablecounter.Store, now func() time.Time, budget string) *faultEngine {
	t.Helper()
	src := faultPolicies
	if budget != "" {
		src = strings.ReplaceAll(src, "on_store_error:", "store_timeout: "+budget+", on_store_error:")
	}
	file, err := policy.Parse("fault.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	fe := &faultEngine{}
	fe.Engine, err = edgelimit.New(edgelimit.Config{
		Policies:   file,
		HashSecret: []byte(strings.Repeat("f", 32)),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:        now,
		Observe: func(ev edgelimit.Event) {
			fe.mu.Lock()
			fe.events = append(fe.events, ev)
			fe.mu.Unlock()
		},
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: now})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return fe
}

// do sends one request to route and returns the verdict and the events of
// its policies. It also returns how long the decision took on the wall
// clock, for the log (the engine's clock is the test's fake one).
func (fe *faultEngine) do(route string) (*edgelimit.Verdict, []edgelimit.Event, time.Duration) {
	fe.mu.Lock()
	fe.events = fe.events[:0]
	fe.mu.Unlock()
	start := time.Now()
	v := fe.Decide(context.Background(), &edgelimit.Input{
		Method: "GET", Path: route, SourceIP: "203.0.113.9",
		Header: limitertest.Headers{"x-api-key": "client-1"},
	})
	took := time.Since(start)
	fe.mu.Lock()
	defer fe.mu.Unlock()
	return v, append([]edgelimit.Event(nil), fe.events...), took
}

func header(v *edgelimit.Verdict, name string) string {
	for _, f := range v.Header() {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// dynaliteProcess is a dynalite this test starts and kills, on its own
// port, with its tables on disk so that they survive a restart.
type dynaliteProcess struct {
	t    *testing.T
	bin  string
	port int
	dir  string
	cmd  *exec.Cmd
}

func startDynalite(t *testing.T) *dynaliteProcess {
	t.Helper()
	bin, err := filepath.Abs("../node_modules/.bin/dynalite")
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("dynalite not installed (%v): run `make deps`", err)
		}
		t.Skipf("dynalite not installed (%v): run `make deps`", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	d := &dynaliteProcess{t: t, bin: bin, port: port, dir: t.TempDir()}
	d.start()
	t.Cleanup(d.kill)
	return d
}

func (d *dynaliteProcess) endpoint() string { return fmt.Sprintf("http://127.0.0.1:%d", d.port) }

func (d *dynaliteProcess) start() {
	d.t.Helper()
	d.cmd = exec.Command(d.bin, "--host", "127.0.0.1", "--port", fmt.Sprint(d.port), "--path", d.dir,
		"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatalf("start dynalite: %v", err)
	}
	// Wait until it answers (any HTTP status will do): a bounded wait for
	// a process to start, not a timing assertion.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", d.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("dynalite did not listen on port %d within 30s", d.port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *dynaliteProcess) kill() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	_ = d.cmd.Wait()
	d.cmd = nil
}

// TestFaultServerKilled kills the DynamoDB server in the middle of a run
// and brings it back, through the engine: while it is down, the routes
// that fail open keep answering (allowed, marked degraded) and those that
// fail closed answer 503 with Retry-After, each within the store budget
// (the default 100 ms: a refused connection fails at once, the SDK's
// retries back off 10 ms at most); nothing panics; and after the restart
// counting resumes exactly where it was (the degraded admissions were not
// counted). Before the kill and after the restart the same policies run
// with a 30 s budget, so that a slow start of the server on a loaded test
// machine does not count as an outage (the budget is not what is tested
// there: a call that answers returns at once).
func TestFaultServerKilled(t *testing.T) {
	t.Parallel()
	d := startDynalite(t)
	ctx := context.Background()
	client, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: d.endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ddb.CreateTable(ctx, client, "edgelimit"); err != nil {
		t.Fatal(err)
	}
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: "edgelimit"})
	if err != nil {
		t.Fatal(err)
	}
	clock := limitertest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	steady := newFaultEngineBudget(t, store, clock.Now, "30s")
	outage := newFaultEngine(t, store, clock.Now)

	fe := steady
	check := func(phase, route string, wantStatus int, wantDegraded bool) {
		t.Helper()
		v, events, took := fe.do(route)
		status := 200
		if !v.Allowed {
			status = v.Status
		}
		if status != wantStatus {
			t.Errorf("%s: GET %s = %d %s, want %d", phase, route, status, v.Body, wantStatus)
		}
		if wantStatus == 503 && header(v, "Retry-After") == "" {
			t.Errorf("%s: GET %s: 503 without Retry-After", phase, route)
		}
		for _, ev := range events {
			if ev.Degraded != wantDegraded {
				t.Errorf("%s: GET %s: policy %s degraded %v (error %v), want %v", phase, route, ev.Policy, ev.Degraded, ev.StoreError, wantDegraded)
			}
			// Once five calls in a row failed, the store's breaker is open:
			// the store is not asked, so there is no store error.
			if wantDegraded && ev.StoreError == nil && ev.Reason != "breaker-open" {
				t.Errorf("%s: GET %s: policy %s degraded without a store error or an open breaker", phase, route, ev.Policy)
			}
		}
		if wantDegraded {
			t.Logf("%s: GET %s = %d in %s (%v)", phase, route, status, took.Round(time.Millisecond), events[0].StoreError)
		}
	}
	for i := range 3 {
		check(fmt.Sprintf("before the kill, request %d", i+1), "/open", 200, false)
		check(fmt.Sprintf("before the kill, request %d", i+1), "/closed", 200, false)
		check(fmt.Sprintf("before the kill, request %d", i+1), "/local", 200, false)
	}
	d.kill()
	fe = outage
	for i := range 4 {
		check(fmt.Sprintf("server down, request %d", i+1), "/open", 200, true)
		check(fmt.Sprintf("server down, request %d", i+1), "/closed", 503, true)
	}
	// on_store_error: local: the instance's own twin holds the limit (this
	// engine never heard from the store, so 5 pass in the outage), then
	// answers 429, not 503: the twin's denial, from the deny cache it
	// shares with the limiter.
	for i := range 5 {
		check(fmt.Sprintf("server down, request %d", i+1), "/local", 200, true)
	}
	if v, _, _ := fe.do("/local"); v.Status != 429 {
		t.Errorf("server down, request 6: GET /local = %d, want 429", v.Status)
	}
	d.start()
	fe = steady
	// The server is back with its table: 3 of 5 were counted before, so
	// exactly 2 more pass, on both routes.
	for i := range 2 {
		check(fmt.Sprintf("after the restart, request %d", i+1), "/open", 200, false)
		check(fmt.Sprintf("after the restart, request %d", i+1), "/closed", 200, false)
		check(fmt.Sprintf("after the restart, request %d", i+1), "/local", 200, false)
	}
	check("after the restart, request 3", "/open", 429, false)
	check("after the restart, request 3", "/closed", 429, false)
	check("after the restart, request 3", "/local", 429, false)
}

// hungServer accepts connections and never answers.
func hungServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var open []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c) // read nothing, answer nothing
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String()
}

// TestFaultHungServer points the engine at a server that accepts
// connections and never answers: every store call is cut off at the
// engine's budget (the error is the context's deadline), fail-open routes
// answer allowed and degraded, fail-closed ones 503.
func TestFaultHungServer(t *testing.T) {
	t.Parallel()
	client, err := ddb.NewClient(context.Background(), ddb.ClientOptions{Endpoint: hungServer(t)})
	if err != nil {
		t.Fatal(err)
	}
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: "edgelimit"})
	if err != nil {
		t.Fatal(err)
	}
	fe := newFaultEngine(t, store, limitertest.NewClock(limitertest.T0).Now)
	for _, tc := range []struct {
		route   string
		allowed bool
		status  int
	}{{"/open", true, 0}, {"/closed", false, 503}} {
		v, events, took := fe.do(tc.route)
		if v.Allowed != tc.allowed || v.Status != tc.status {
			t.Errorf("GET %s against a hung server = allowed %v, status %d; want %v, %d", tc.route, v.Allowed, v.Status, tc.allowed, tc.status)
		}
		if len(events) == 0 {
			t.Fatalf("GET %s: no events", tc.route)
		}
		for _, ev := range events {
			if !ev.Degraded || !errors.Is(ev.StoreError, context.DeadlineExceeded) {
				t.Errorf("GET %s: policy %s: degraded %v, error %v; want degraded by context.DeadlineExceeded", tc.route, ev.Policy, ev.Degraded, ev.StoreError)
			}
		}
		t.Logf("GET %s: cut off after %s (%v)", tc.route, took.Round(time.Millisecond), events[0].StoreError)
	}
}

// TestFaultThrottled: a server that throttles every call. The SDK retries
// a throttled call (the store caps its back-off at
// dynamostore.Config.RetryBackoff, so its attempts fit a 100 ms budget) and gives
// up after its attempts, no retries of ours; the error is classified
// durablecounter.ErrThrottled; fail-open answers allowed, fail-closed 503.
func TestFaultThrottled(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		body := `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}`
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(body))), 10))
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	client, err := ddb.NewClient(context.Background(), ddb.ClientOptions{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: "edgelimit"})
	if err != nil {
		t.Fatal(err)
	}
	// A 30 s budget: the SDK's attempts (at most 10 ms apart) end long
	// before it however loaded the test machine, so the error is the
	// throttling, not the deadline (TestFaultHungServer tests that); the
	// call returns when its attempts are spent, not at the budget.
	fe := newFaultEngineBudget(t, store, limitertest.NewClock(limitertest.T0).Now, "30s")
	for _, tc := range []struct {
		route   string
		allowed bool
		status  int
	}{{"/open", true, 0}, {"/closed", false, 503}} {
		requests.Store(0)
		v, events, took := fe.do(tc.route)
		if v.Allowed != tc.allowed || v.Status != tc.status {
			t.Errorf("GET %s against a throttling server = allowed %v, status %d; want %v, %d", tc.route, v.Allowed, v.Status, tc.allowed, tc.status)
		}
		for _, ev := range events {
			if !ev.Degraded || !errors.Is(ev.StoreError, durablecounter.ErrThrottled) {
				t.Errorf("GET %s: policy %s: degraded %v, error %v; want degraded, throttled", tc.route, ev.Policy, ev.Degraded, ev.StoreError)
			}
		}
		// The route's two policies are one batch: one TransactWriteItems,
		// of at most the SDK's attempts, none of ours.
		if n, most := requests.Load(), int64(client.Options().Retryer.MaxAttempts()); n > most {
			t.Errorf("GET %s: %d calls to a throttling server for one batch, want at most %d (the SDK's attempts; no retries of ours)", tc.route, n, most)
		}
		t.Logf("GET %s: %d calls in %s, %v", tc.route, requests.Load(), took.Round(time.Millisecond), events[0].StoreError)
	}
}
