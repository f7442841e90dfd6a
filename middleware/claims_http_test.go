package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/middleware"
)

// A net/http service that verifies its own JWTs (golang-jwt) keys a
// policy by a claim through WithClaims; without it, the claim is missing.
func TestHandlerWithClaimsFromJWT(t *testing.T) {
	const policies = `
version: 1
policies:
  - {name: per-user, routes: ["GET /r"], key: "claim:sub", strategy: durable, limit: 1, window: 1h}
  - {name: per-org, routes: ["GET /o"], key: "claim:org", strategy: durable, limit: 1, window: 1h}
`
	secret := []byte(strings.Repeat("s", 32))
	sign := func(claims jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	type key struct{}
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, err := jwt.Parse(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
				func(*jwt.Token) (any, error) { return secret, nil }, jwt.WithValidMethods([]string{"HS256"}))
			if err != nil {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), key{}, tok.Claims.(jwt.MapClaims))))
		})
	}
	claims := func(r *http.Request) edgelimit.Getter {
		c, _ := r.Context().Value(key{}).(jwt.MapClaims)
		return middleware.Claims(c)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	run := func(h http.Handler, path, tok string) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		h.ServeHTTP(w, r)
		return w.Code
	}
	e, _ := newEngine(t, policies)
	h := auth(middleware.Handler(e, ok, middleware.WithClaims(claims)))
	alice, bob := sign(jwt.MapClaims{"sub": "alice", "org": 42}), sign(jwt.MapClaims{"sub": "bob", "org": 42})
	if got := []int{run(h, "/r", alice), run(h, "/r", alice), run(h, "/r", bob)}; got[0] != 200 || got[1] != 429 || got[2] != 200 {
		t.Errorf("by sub: %v, want [200 429 200]", got)
	}
	// A numeric claim is its JSON text: alice and bob share org 42.
	if got := []int{run(h, "/o", alice), run(h, "/o", bob)}; got[0] != 200 || got[1] != 429 {
		t.Errorf("by org: %v, want [200 429]", got)
	}
	e2, _ := newEngine(t, policies)
	if code := run(auth(middleware.Handler(e2, ok)), "/r", alice); code != 400 {
		t.Errorf("without WithClaims: %d, want 400 (the claim is missing)", code)
	}
}

// TestHandlerWritersAreRequestsOwn: the wrapping writers are recycled once
// a handler returns, and a handler that writes nothing has its headers
// written by net/http after that; each response still carries its own
// request's RateLimit fields, under concurrency (run with -race).
func TestHandlerWritersAreRequestsOwn(t *testing.T) {
	e, _ := newEngine(t, `
version: 1
policies:
  - {name: k, routes: ["GET /*"], key: header:X-Api-Key, strategy: durable, limit: 1000, window: 1m}
`)
	srv := httptest.NewServer(middleware.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/write" {
			_, _ = w.Write([]byte("x"))
		} // else: nothing written; net/http sends the headers after return
	})))
	defer srv.Close()
	const clients, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("key-%d", c)
			for i := range each {
				path := "/quiet"
				if i%2 == 1 {
					path = "/write"
				}
				req, _ := http.NewRequest("GET", srv.URL+path, nil)
				req.Header.Set("X-Api-Key", key)
				resp, err := srv.Client().Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				want := fmt.Sprintf(`"k";r=%d;t=60`, 999-i)
				if got := resp.Header.Get("RateLimit"); got != want || resp.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(999-i) {
					errs <- fmt.Errorf("%s request %d: RateLimit %q, remaining %q; want %q", key, i, got, resp.Header.Get("X-RateLimit-Remaining"), want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
