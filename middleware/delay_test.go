package middleware_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
)

// delayEngine is an engine with one gcra policy with max_delay (one a
// second, burst 1, max_delay 2s) of strategy (durable, or kv: the same
// bucket) on a memory store, its clock standing still at t0 and its Sleep
// sleep. t0 is an hour ahead of the wall clock, so that a deadline in the
// engine's clock is a real one that a store call's budget honours too.
func delayEngine(t *testing.T, strategy string, sleep func(ctx context.Context, d time.Duration) error, observe func(edgelimit.Event)) (e *edgelimit.Engine, t0 time.Time) {
	t.Helper()
	alg := ""
	if strategy == "durable" {
		alg = "algorithm: gcra, "
	}
	f, err := policy.Parse("p.yaml", []byte(`version: 1
policies:
  - {name: paced, routes: ["ANY /a"], key: ip, strategy: `+strategy+`, `+alg+`limit: 1, window: 1s, burst: 1, max_delay: 2s}
`))
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now().Add(time.Hour)
	clock := limitertest.NewClock(t0)
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	kv := kvbucket.NewMemory(kvbucket.MemoryConfig{Now: clock.Now})
	e, err = edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("s", 32)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock.Now, Sleep: sleep, Observe: observe,
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			if p.Strategy == kvbucket.Strategy {
				return kvbucket.New(kvbucket.Config{Policy: p, KV: kv})
			}
			return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
		}})
	if err != nil {
		t.Fatal(err)
	}
	return e, t0
}

// forEachDelayStrategy runs f for a durable gcra and a kv bucket.
func forEachDelayStrategy(t *testing.T, f func(t *testing.T, strategy string)) {
	for _, s := range []string{"durable", "kv"} {
		t.Run(s, func(t *testing.T) { f(t, s) })
	}
}

// TestMaxDelayLambdaDeadline: through the HTTP API adapter, a request
// whose invocation deadline (the context's, as the Lambda runtime sets it)
// leaves less than the margin after its wait is answered 429 at once,
// without running the handler; with room, it waits and runs.
func TestMaxDelayLambdaDeadline(t *testing.T) {
	forEachDelayStrategy(t, testMaxDelayLambdaDeadline)
}

func testMaxDelayLambdaDeadline(t *testing.T, strategy string) {
	var slept atomic.Int64
	e, t0 := delayEngine(t, strategy, func(ctx context.Context, d time.Duration) error { slept.Add(int64(d)); return nil }, nil)
	ran := 0
	h := middleware.HTTPAPI(e, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		ran++
		return events.APIGatewayV2HTTPResponse{StatusCode: 200}, nil
	})
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/a", RequestContext: events.APIGatewayV2HTTPRequestContext{
		HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: "/a", SourceIP: "198.51.100.4"}}}
	invoke := func(left time.Duration) int {
		ctx, cancel := context.WithDeadline(context.Background(), t0.Add(left))
		defer cancel()
		resp, err := h(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	if s := invoke(10 * time.Second); s != 200 || ran != 1 || slept.Load() != 0 {
		t.Fatalf("first: status %d, ran %d, slept %s; want 200 at once", s, ran, time.Duration(slept.Load()))
	}
	if s := invoke(1500 * time.Millisecond); s != 429 || ran != 1 || slept.Load() != 0 {
		t.Fatalf("turn 1s away, deadline 1.5s away: status %d, ran %d, slept %s; want 429, handler not run, no wait", s, ran, time.Duration(slept.Load()))
	}
	if s := invoke(3 * time.Second); s != 200 || ran != 2 || slept.Load() != int64(time.Second) {
		t.Fatalf("turn 1s away, deadline 3s away: status %d, ran %d, slept %s; want 200 after 1s (the turn the 429 gave back)", s, ran, time.Duration(slept.Load()))
	}
}

// TestMaxDelayClientGone: over real HTTP, a client that leaves while its
// request waits for its turn never reaches the handler, and its turn goes
// to the next request.
func TestMaxDelayClientGone(t *testing.T) {
	forEachDelayStrategy(t, testMaxDelayClientGone)
}

func testMaxDelayClientGone(t *testing.T, strategy string) {
	waiting := make(chan time.Duration, 4)
	cutDone := make(chan struct{}, 4)
	e, _ := delayEngine(t, strategy, func(ctx context.Context, d time.Duration) error {
		waiting <- d
		<-ctx.Done() // only the client's leaving ends this wait
		return ctx.Err()
	}, func(ev edgelimit.Event) {
		if ev.Reason == "wait-cut" {
			cutDone <- struct{}{} // after the units were given back
		}
	})
	var ran atomic.Int64
	srv := httptest.NewServer(middleware.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Add(1) })))
	defer srv.Close()
	if resp, err := http.Get(srv.URL + "/a"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/a", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	if d := <-waiting; d != time.Second {
		t.Errorf("second request waits %s, want 1s", d)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the client that left: %v, want its own cancellation", err)
	}
	<-cutDone
	// The next request waits for the same turn: the one that left gave it
	// back (else its turn would be 2s away). Its wait ends when it leaves
	// too.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	req2, _ := http.NewRequestWithContext(ctx2, http.MethodGet, srv.URL+"/a", nil)
	go func() {
		resp, err := http.DefaultClient.Do(req2)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	if d := <-waiting; d != time.Second {
		t.Errorf("the next request waits %s, want 1s (the turn given back)", d)
	}
	cancel2()
	<-done
	if n := ran.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once (the requests that left never reach it)", n)
	}
}
