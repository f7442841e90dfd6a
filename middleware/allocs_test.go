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
// alone. Every Lambda adapter (ALB in both header forms), allowed or
// denied: the request's memory and the response's header map (a map header
// and one group: the handler's map is copied, never written to, and the copy
// stays one group when the merged headers fit in one), a denial's body
// being interned. It counts allocations, not time; the race detector's own
// are left out.
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
	for _, tc := range []struct {
		path               string
		status             int
		http, bare, lambda float64
	}{
		{"/one/x", 200, 2, 1, 3},
		{"/spent/x", 429, 1, 1, 3},
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
		for _, lc := range lambdaAdapters(e, tc.path) {
			got := testing.AllocsPerRun(500, func() {
				i = (i + 1) % n
				if code := lc.call(keys[i]); code != tc.status {
					t.Fatalf("%s %s: status %d, want %d", lc.name, tc.path, code, tc.status)
				}
			})
			if got > tc.lambda {
				t.Errorf("%s %s (%d): %v allocations per request, want at most %v", lc.name, tc.path, tc.status, got, tc.lambda)
			}
			t.Logf("%s %s (%d): %v allocations per request", lc.name, tc.path, tc.status, got)
		}
	}
}

// lambdaAdapter calls one Lambda adapter, around a handler that answers 200
// with a shared Content-Type header map, for a request to path with the
// given API key, and returns the response's status.
type lambdaAdapter struct {
	name string
	call func(key string) int
}

// lambdaAdapters is every Lambda adapter (ALB in both header forms), each
// with its event built once and only its key changed per call.
func lambdaAdapters(e *edgelimit.Engine, path string) []lambdaAdapter {
	ctx := context.Background()
	httpAPI := middleware.HTTPAPI(e, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: jsonHeaders, Body: `{"ok":true}`}, nil
	})
	v2 := events.APIGatewayV2HTTPRequest{RawPath: path, Headers: map[string]string{"x-api-key": ""}}
	v2.RequestContext.HTTP = events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: path, SourceIP: "10.0.0.1"}

	furl := middleware.FunctionURL(e, func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		return events.LambdaFunctionURLResponse{StatusCode: 200, Headers: jsonHeaders, Body: `{"ok":true}`}, nil
	})
	fu := events.LambdaFunctionURLRequest{RawPath: path, Headers: map[string]string{"x-api-key": ""}}
	fu.RequestContext.HTTP = events.LambdaFunctionURLRequestContextHTTPDescription{Method: "GET", Path: path, SourceIP: "10.0.0.1"}

	jsonMulti := map[string][]string{"Content-Type": {"application/json"}}
	rest := middleware.RESTAPI(e, func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{StatusCode: 200, MultiValueHeaders: jsonMulti, Body: `{"ok":true}`}, nil
	})
	r1 := events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: path, Resource: path, Headers: map[string]string{"x-api-key": ""}}
	r1.RequestContext.Identity.SourceIP = "10.0.0.1"

	alb := middleware.ALB(e, func(_ context.Context, req events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
		if req.MultiValueHeaders != nil {
			return events.ALBTargetGroupResponse{StatusCode: 200, MultiValueHeaders: jsonMulti, Body: `{"ok":true}`}, nil
		}
		return events.ALBTargetGroupResponse{StatusCode: 200, Headers: jsonHeaders, Body: `{"ok":true}`}, nil
	})
	as := events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: path, Headers: map[string]string{"x-api-key": "", "x-forwarded-for": "10.0.0.1"}}
	am := events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: path,
		MultiValueHeaders: map[string][]string{"x-api-key": {""}, "x-forwarded-for": {"10.0.0.1"}}}
	fail := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	// Nine headers before the merge, eight after: the copy is still one
	// group of Go's map (its header and the group), not a table of them.
	full := map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store", "X-Request-Id": "r1", "ratelimit": "stale"}
	fullAPI := middleware.HTTPAPI(e, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: full, Body: `{"ok":true}`}, nil
	})
	return []lambdaAdapter{
		{"HTTPAPI, eight headers", func(key string) int {
			v2.Headers["x-api-key"] = key
			resp, err := fullAPI(ctx, v2)
			fail(err)
			if resp.StatusCode == 200 && len(resp.Headers) != 8 {
				panic(fmt.Sprintf("%d headers, want 8: %v", len(resp.Headers), resp.Headers))
			}
			return resp.StatusCode
		}},
		{"HTTPAPI", func(key string) int {
			v2.Headers["x-api-key"] = key
			resp, err := httpAPI(ctx, v2)
			fail(err)
			return resp.StatusCode
		}},
		{"FunctionURL", func(key string) int {
			fu.Headers["x-api-key"] = key
			resp, err := furl(ctx, fu)
			fail(err)
			return resp.StatusCode
		}},
		{"RESTAPI", func(key string) int {
			r1.Headers["x-api-key"] = key
			resp, err := rest(ctx, r1)
			fail(err)
			return resp.StatusCode
		}},
		{"ALB", func(key string) int {
			as.Headers["x-api-key"] = key
			resp, err := alb(ctx, as)
			fail(err)
			return resp.StatusCode
		}},
		{"ALB multi-value", func(key string) int {
			am.MultiValueHeaders["x-api-key"][0] = key
			resp, err := alb(ctx, am)
			fail(err)
			return resp.StatusCode
		}},
	}
}
