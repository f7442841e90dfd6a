package edgelimit_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
)

// slowRequests starts n requests whose store calls wait for the store's
// slow gate, and returns once all n are waiting in the store; wait waits
// for their answers.
func (fx *breakerFixture) slowRequests(s *store, path string, n int) (wait func()) {
	fx.t.Helper()
	var wg sync.WaitGroup
	before := s.calls.Load()
	for i := range n {
		wg.Go(func() {
			fx.e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: path, SourceIP: "192.0.2.1",
				Header: limitertest.Headers(map[string]string{"X-Slow": "1", "X-Key": "hot", "X-N": string(rune('a' + i))})})
		})
	}
	for s.calls.Load() < before+int64(n) {
		time.Sleep(time.Millisecond)
	}
	return wg.Wait
}

func (fx *breakerFixture) getKey(key string) *edgelimit.Verdict {
	return fx.e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/p", SourceIP: "192.0.2.1",
		Header: limitertest.Headers(map[string]string{"X-Key": key})})
}

// TestBreakerForgivesFailuresWhileTheStoreAnswers: calls that fail while
// the store answers another call in time (a hot item that many concurrent
// calls queue on) do not open the breaker; the same failures with no
// answer while they were out do. All at one instant of the engine's
// clock: what counts is the order of answers, not time.
func TestBreakerForgivesFailuresWhileTheStoreAnswers(t *testing.T) {
	s := &store{mode: "ok", slow: make(chan struct{})}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: p, routes: ["GET /p"], key: header:X-Key, strategy: durable, limit: 10, window: 1m, on_store_error: local,
     store_timeout: 30s, store_breaker: {failures: 3}}
`, map[string]*store{"p": s}, map[string]string{"p": "table"})
	get := fx.getKey

	// Five calls of the hot key wait; another key's call is answered
	// meanwhile; then the five fail.
	wait := fx.slowRequests(s, "/p", 5)
	if v := get("cold"); v.Decisions[0].Degraded {
		t.Fatal("the cold key's call was not answered by the store")
	}
	close(s.slow)
	wait()
	if got := fx.transitions(); len(got) != 0 {
		t.Fatalf("breaker changes %v after 5 failures while the store answered another call, want none", got)
	}
	calls := s.calls.Load()
	if v := get("cold"); v.Decisions[0].Degraded || s.calls.Load() != calls+1 {
		t.Fatalf("after forgiven failures: degraded %v, %d store calls, want the store asked", v.Decisions[0].Degraded, s.calls.Load()-calls)
	}

	// Three calls wait and fail with no answer while they are out: the
	// store is not answering, and the breaker opens.
	s.mu.Lock()
	s.slow = make(chan struct{})
	s.mu.Unlock()
	wait = fx.slowRequests(s, "/p", 3)
	close(s.slow)
	wait()
	if got := fx.transitions(); strings.Join(got, " ") != "durable:open" {
		t.Fatalf("breaker changes %v after 3 failures with no answer between, want open", got)
	}
	calls = s.calls.Load()
	if v := get("cold"); !v.Decisions[0].Degraded || s.calls.Load() != calls {
		t.Errorf("open: degraded %v, %d store calls; want a local decision without the store", v.Decisions[0].Degraded, s.calls.Load()-calls)
	}
}

// TestBreakerCallsFromBeforeItOpenedCannotReopenIt: calls admitted while
// the breaker was closed, still out when it opens and closes again, fail
// after it closed: they say nothing about the store that has answered the
// probe since, and it stays closed.
func TestBreakerCallsFromBeforeItOpenedCannotReopenIt(t *testing.T) {
	s := &store{mode: "fail", slow: make(chan struct{})}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: p, routes: ["GET /p"], key: header:X-Key, strategy: durable, limit: 10, window: 1m, on_store_error: local,
     store_timeout: 30s, store_breaker: {failures: 2, cool_down: 1s, probes: 1}}
`, map[string]*store{"p": s}, map[string]string{"p": "table"})
	wait := fx.slowRequests(s, "/p", 4) // out since before the breaker opened
	fx.getKey("k")
	fx.getKey("k")
	fx.advance(time.Second)
	s.set("ok")
	fx.getKey("k") // the probe: answered, closes it
	if got := fx.transitions(); strings.Join(got, " ") != "durable:open durable:half-open durable:closed" {
		t.Fatalf("breaker changes %v", got)
	}
	close(s.slow)
	wait()
	if got := fx.transitions(); len(got) != 3 {
		t.Errorf("breaker changes %v: the calls from before it opened opened it again", got)
	}
	// Calls admitted after it closed count as ever.
	s.set("fail")
	fx.getKey("k")
	fx.getKey("k")
	if got := fx.transitions(); strings.Join(got, " ") != "durable:open durable:half-open durable:closed durable:open" {
		t.Errorf("breaker changes %v, want it open after 2 new failures", got)
	}
}

// TestBreakerHalfOpenTriesEveryProbe: a half-open breaker closes on the
// first probe answered, not a cool-down later for one slow probe; it opens
// again once all its probes (3) failed, and a store still down costs no
// more than those three calls per cool-down.
func TestBreakerHalfOpenTriesEveryProbe(t *testing.T) {
	s := &store{mode: "fail"}
	fx := newBreakerFixture(t, `version: 1
policies:
  - {name: p, routes: ["GET /p"], key: ip, strategy: durable, limit: 10, window: 1m, on_store_error: deny,
     store_timeout: 30s, store_breaker: {failures: 1, cool_down: 1s, probes: 3}}
`, map[string]*store{"p": s}, map[string]string{"p": "table"})
	fx.get("/p") // opens it
	for cycle := range 2 {
		fx.advance(time.Second)
		calls := s.calls.Load()
		for range 10 {
			fx.get("/p")
		}
		if got := s.calls.Load() - calls; got != 3 {
			t.Errorf("cycle %d: %d store calls in a half-open period of a dead store, want 3", cycle, got)
		}
	}
	want := "durable:open durable:half-open durable:open durable:half-open durable:open"
	if got := fx.transitions(); strings.Join(got, " ") != want {
		t.Fatalf("breaker changes %v, want %s", got, want)
	}
	// Back: two probes fail (a slow answer), the third is answered.
	fx.advance(time.Second)
	fx.get("/p")
	fx.get("/p")
	s.set("ok")
	if v := fx.get("/p"); v.Status != 0 {
		t.Errorf("third probe: status %d", v.Status)
	}
	if got := fx.transitions(); strings.Join(got, " ") != want+" durable:half-open durable:closed" {
		t.Errorf("breaker changes %v, want it closed by the third probe", got)
	}
}
