package limitertest

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/edgelimit/edgelimit"
)

// withHold is the application of RunInFlightEngine's server: it reserves
// the slots its X-Hold header says of the speech policy
// (edgelimit.WithReservation), before the engine decides. A real
// application derives them from what the request asks for, bounded; the
// suite's header is its own.
func withHold(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, err := strconv.ParseInt(r.Header.Get("X-Hold"), 10, 64); err == nil {
			r = r.WithContext(edgelimit.WithReservation(r.Context(), "speech", n))
		}
		next.ServeHTTP(w, r)
	})
}

// testEngineReservation: a request whose application reserved 2 slots of
// the in-flight policy (limit 2) holds both while its handler runs, and
// gives both back after its response, or its panic; a reservation of more
// than the limit is a 429 telling the client to wait a lease.
func testEngineReservation(t *testing.T, s *server) {
	ctx := context.Background()
	a := s.sendHold(ctx, "/tts", "alice", "a", "", 2)
	s.waitEntered("a")
	r := s.want429("/tts", "alice", "speech") // one slot: none left
	if got, want := r.header.Get("RateLimit"), `"speech";r=0;t=1`; got != want {
		t.Errorf("RateLimit with both slots held by one request = %q, want %q", got, want)
	}
	s.open("a")
	if r := get(t, a); r.status != 200 {
		t.Fatalf("the request holding 2: %d %v %s", r.status, r.err, r.body)
	}
	s.waitFinished()
	// Both came back: a request of one slot, then another of one.
	x := s.send(ctx, "/tts", "alice", "x", "")
	s.waitEntered("x")
	r = get(t, s.sendHold(ctx, "/tts", "alice", "", "", 2))
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("a reservation of 2 with 1 free: %d, want 429", r.status)
	}
	y := s.send(ctx, "/tts", "alice", "y", "")
	s.waitEntered("y")
	s.open("x")
	s.open("y")
	get(t, x)
	get(t, y)
	s.waitFinished()
	s.waitFinished()
	// A holder of 2 that panics gives both back.
	if r := get(t, s.sendHold(ctx, "/tts", "alice", "p", "panic", 2)); r.err == nil {
		t.Fatalf("panic: %d, want the connection dropped", r.status)
	}
	s.waitEntered("p")
	s.waitFinished()
	// More than the limit never fits: a 429 with Retry-After the lease.
	r = get(t, s.sendHold(ctx, "/tts", "alice", "", "", 3))
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "900" {
		t.Fatalf("a reservation of 3 with limit 2: %d, Retry-After %q; want 429, 900 (the lease)", r.status, r.header.Get("Retry-After"))
	}
	if got, want := r.header.Get("RateLimit"), `"speech";r=2;t=1`; got != want {
		t.Errorf("RateLimit of a reservation that never fits = %q, want %q", got, want)
	}
	b := s.sendHold(ctx, "/tts", "alice", "b", "", 2)
	s.waitEntered("b")
	s.open("b")
	if r := get(t, b); r.status != 200 {
		t.Fatalf("a reservation of 2 after the panic: %d %v", r.status, r.err)
	}
	s.waitFinished()
}
