package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/middleware"
)

// TestSteadyStateAllocations pins what a decided request allocates once the
// store holds its key, through each adapter, so that a change that adds an
// allocation to the per-request path fails here (the escape-analysis test
// does not see a slice grown by append, the way a per-request list of
// spent batch groups cost every request one). net/http: the request's own
// memory (Engine.Decide: its context, key and header values) and, when
// allowed, the request copy that carries the context (r.WithContext),
// which WithoutVerdictContext leaves out; a denial, the request's memory
// alone. HTTP API: the request's memory and
// the response's header map (two allocations of the runtime's: the handler's
// map is copied, never written to), and a denial's body as a string. It
// counts allocations, not time; the race detector's own are left out.
func TestSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	e, _ := buildEngine(t, benchPolicies, nil)
	const n = 64
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%03d", i)
		for _, path := range []string{"/one/x", "/spent/x"} {
			in := edgelimit.Input{Method: "GET", Path: path, SourceIP: "10.0.0.1", Header: limitertest.Headers{"x-api-key": keys[i]}}
			e.Decide(context.Background(), &in).Release()
		}
	}
	ok := []byte(`{"ok":true}`)
	contentType := []string{"application/json"}
	h := middleware.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = contentType
		_, _ = w.Write(ok)
	}))
	bare := middleware.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = contentType
		_, _ = w.Write(ok)
	}), middleware.WithoutVerdictContext())
	lh := middleware.HTTPAPI(e, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: jsonHeaders, Body: `{"ok":true}`}, nil
	})
	for _, tc := range []struct {
		path               string
		status             int
		http, bare, lambda float64
	}{
		{"/one/x", 200, 2, 1, 3},
		{"/spent/x", 429, 1, 1, 4},
	} {
		r, err := http.NewRequest("GET", "https://api.example.com"+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.RemoteAddr = "10.0.0.1:52000"
		r.Header.Set("X-Api-Key", keys[0])
		w := &discardWriter{h: http.Header{}}
		i := 0
		for _, hc := range []struct {
			name string
			h    http.Handler
			want float64
		}{{"net/http", h, tc.http}, {"net/http WithoutVerdictContext", bare, tc.bare}} {
			got := testing.AllocsPerRun(500, func() {
				i = (i + 1) % n
				r.Header["X-Api-Key"][0] = keys[i]
				clear(w.h)
				w.code = 0
				hc.h.ServeHTTP(w, r)
				if w.code != tc.status && !(w.code == 0 && tc.status == 200) {
					t.Fatalf("%s: status %d, want %d", tc.path, w.code, tc.status)
				}
			})
			if got > hc.want {
				t.Errorf("%s %s (%d): %v allocations per request, want at most %v", hc.name, tc.path, tc.status, got, hc.want)
			}
		}
		ev := events.APIGatewayV2HTTPRequest{RawPath: tc.path, Headers: map[string]string{"x-api-key": keys[0]}}
		ev.RequestContext.HTTP = events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: tc.path, SourceIP: "10.0.0.1"}
		got := testing.AllocsPerRun(500, func() {
			i = (i + 1) % n
			ev.Headers["x-api-key"] = keys[i]
			resp, err := lh(context.Background(), ev)
			if err != nil || resp.StatusCode != tc.status {
				t.Fatalf("%s: %d, %v; want %d", tc.path, resp.StatusCode, err, tc.status)
			}
		})
		if got > tc.lambda {
			t.Errorf("HTTPAPI %s (%d): %v allocations per request, want at most %v", tc.path, tc.status, got, tc.lambda)
		}
	}
}
