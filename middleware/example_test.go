package middleware_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
)

func hello(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: `{"hello":"world"}`}, nil
}

// Build the engine once, outside the handler, and wrap the handler for
// lambda.Start. On Lambda, use dynamostore.New so that every
// instance shares the counts.
func ExampleHTTPAPI() {
	policies, err := policy.Load("policies.yaml")
	if err != nil {
		log.Fatal(err)
	}
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	engine, err := edgelimit.New(edgelimit.Config{Policies: policies, Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
		return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
	}})
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(middleware.HTTPAPI(engine, hello))
}

// The net/http middleware answers exactly as the Lambda adapters do.
func ExampleHandler() {
	policies, err := policy.Parse("policies.yaml", []byte(`
version: 1
policies:
  - name: search
    routes: ["GET /search"]
    key: ip
    strategy: durable
    limit: 2
    window: 1m
`))
	if err != nil {
		log.Fatal(err)
	}
	noon := func() time.Time { return time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC) }
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	engine, err := edgelimit.New(edgelimit.Config{Policies: policies, Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
		return durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: noon})
	}})
	if err != nil {
		log.Fatal(err)
	}
	search := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "results") })
	h := middleware.Handler(engine, search)
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/search", nil))
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit: "search";r=1;t=60 Retry-After: ""
	// 200 RateLimit: "search";r=0;t=60 Retry-After: ""
	// 429 RateLimit: "search";r=0;t=60 Retry-After: "60"
}

// A net/http service behind its own authentication keys a policy by a
// claim: WithClaims says where the claims are. Here a stand-in for a JWT
// middleware (golang-jwt's parser would fill the same jwt.MapClaims) puts
// them in the request's context.
func ExampleWithClaims() {
	policies, err := policy.Parse("policies.yaml", []byte(`
version: 1
policies:
  - name: per-user
    routes: ["GET /reports"]
    key: claim:sub
    strategy: durable
    limit: 1
    window: 1h
`))
	if err != nil {
		log.Fatal(err)
	}
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	engine, err := edgelimit.New(edgelimit.Config{Policies: policies, Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
		return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
	}})
	if err != nil {
		log.Fatal(err)
	}
	type claimsKey struct{}
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A real service verifies the bearer token here.
			claims := map[string]any{"sub": r.Header.Get("X-Demo-User"), "scope": "reports"}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, claims)))
		})
	}
	claimsOf := func(r *http.Request) edgelimit.Getter {
		m, _ := r.Context().Value(claimsKey{}).(map[string]any)
		return middleware.Claims(m)
	}
	reports := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "report") })
	h := authenticate(middleware.Handler(engine, reports, middleware.WithClaims(claimsOf)))
	for _, user := range []string{"alice", "alice", "bob"} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/reports", nil)
		r.Header.Set("X-Demo-User", user)
		h.ServeHTTP(w, r)
		fmt.Println(user, w.Code)
	}
	// Output:
	// alice 200
	// alice 429
	// bob 200
}
