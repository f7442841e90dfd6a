package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit/middleware"
)

// TestAbsurdInput runs malformed and oversized requests through every
// adapter: each gets a clear 4xx or the normal decision, never a panic or a
// 5xx.
func TestAbsurdInput(t *testing.T) {
	big := strings.Repeat("k", 64<<10)
	hugeXFF := strings.Repeat("198.51.100.1, ", 64<<10/14)
	withKey := func(c call, extra map[string]string) call {
		h := map[string]string{"X-Api-Key": "key-1"}
		for k, v := range extra {
			h[k] = v
		}
		c.Header = h
		return c
	}
	const ip = "203.0.113.7"
	tests := []struct {
		name string
		call call
		// want lists the acceptable statuses; the first is the one expected
		// of the Lambda adapters.
		want []int
		// httpWant, if set, is what the net/http adapter may answer instead:
		// a real server would refuse some of these request lines before any
		// handler runs, and http.Request carries the path decoded.
		httpWant []int
	}{
		{"64 KiB key header", call{Method: "GET", Path: "/paid/x", IP: ip, Header: map[string]string{"X-Api-Key": big}}, []int{400}, nil},
		{"64 KiB other header", withKey(call{Method: "GET", Path: "/paid/x", IP: ip}, map[string]string{"X-Big": big}), []int{200}, nil},
		{"64 KiB token and proof headers", withKey(call{Method: "GET", Path: "/paid/x", IP: ip},
			map[string]string{"Edgelimit-Token": big, "Edgelimit-Proof": big}), []int{200}, nil},
		{"invalid UTF-8 in key header", call{Method: "GET", Path: "/paid/x", IP: ip, Header: map[string]string{"X-Api-Key": "k\xff\xfe"}}, []int{400}, nil},
		{"invalid UTF-8 in path", withKey(call{Method: "GET", Path: "/paid/\xff\xfe", IP: ip}, nil), []int{400}, []int{200, 400}},
		{"NUL and DEL in path", withKey(call{Method: "GET", Path: "/paid/\x00\x7f", IP: ip}, nil), []int{200}, nil},
		{"undecodable escape in path", withKey(call{Method: "GET", Path: "/paid/%zz", IP: ip}, nil), []int{400}, []int{200, 400}},
		{"empty method", withKey(call{Method: "", Path: "/paid/x", IP: ip}, nil), []int{400}, nil},
		{"lower-case method", withKey(call{Method: "get", Path: "/paid/x", IP: ip}, nil), []int{400}, nil},
		{"very long method", withKey(call{Method: strings.Repeat("GET", 1000), Path: "/paid/x", IP: ip}, nil), []int{400}, nil},
		{"method with a space", withKey(call{Method: "GET /", Path: "/paid/x", IP: ip}, nil), []int{400}, nil},
		{"path without leading slash", withKey(call{Method: "GET", Path: "paid/x", IP: ip}, nil), []int{400}, nil},
		{"empty path", withKey(call{Method: "GET", Path: "", IP: ip}, nil), []int{400}, nil},
		{"very long path", withKey(call{Method: "GET", Path: "/paid/" + strings.Repeat("a", 8192), IP: ip}, nil), []int{400}, nil},
		{"dot segments out of the route", withKey(call{Method: "GET", Path: "/paid/%2e%2e/free", IP: ip}, nil), []int{200}, nil},
		{"huge X-Forwarded-For", call{Method: "GET", Path: "/ip/x", IP: ip, Header: map[string]string{"X-Forwarded-For": hugeXFF}}, []int{200}, nil},
		{"source address not an IP", call{Method: "GET", Path: "/ip/x", IP: "not-an-ip"}, []int{400}, nil},
		{"no source address", call{Method: "GET", Path: "/ip/x", IP: ""}, []int{400}, nil},
		{"IPv6 source address with a zone", call{Method: "GET", Path: "/ip/x", IP: "fe80::1%eth0"}, []int{200}, nil},
	}
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			for _, tt := range tests {
				e, _ := newEngine(t, testPolicies)
				r := a.build(t, e, nil, nil)(tt.call)
				want := tt.want
				if a.name == "Handler" && tt.httpWant != nil {
					want = tt.httpWant
				}
				if !slices.Contains(want, r.Status) {
					t.Errorf("%s: status = %d, want one of %v (body %s)", tt.name, r.Status, want, r.Body)
				}
				if r.Err != nil {
					t.Errorf("%s: error %v", tt.name, r.Err)
				}
				if r.Ran != (r.Status == 200) {
					t.Errorf("%s: handler ran = %v with status %d", tt.name, r.Ran, r.Status)
				}
				if r.Status != 200 && r.Header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s: status %d without a problem body: Content-Type %q", tt.name, r.Status, r.Header.Get("Content-Type"))
				}
				if r.Status == 400 && strings.Contains(r.Body, "kkkk") {
					t.Errorf("%s: 400 body echoes the client's input: %.80s", tt.name, r.Body)
				}
			}
		})
	}
}

// TestDotSegmentsLimitedLikeTarget: /public/%2e%2e/paid/x spends the quota of
// /paid/x, through every adapter.
func TestDotSegmentsLimitedLikeTarget(t *testing.T) {
	paths := []string{"/public/%2e%2e/paid/x", "/public/%2E%2E/paid/x", "/public/./../paid/x", "/paid/x"}
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			e, _ := newEngine(t, testPolicies)
			run := a.build(t, e, nil, nil)
			var got []int
			for _, p := range paths {
				got = append(got, run(get(p, "key-1")).Status)
			}
			if want := []int{200, 200, 200, 429}; !slices.Equal(got, want) {
				t.Errorf("statuses for %q = %v, want %v", paths, got, want)
			}
		})
	}
}

// TestNilMaps sends events with every map nil (and otherwise empty request
// contexts) through the Lambda adapters, and handler responses with nil
// header maps back.
func TestNilMaps(t *testing.T) {
	ctx := context.Background()
	type want struct {
		path   string
		status int
	}
	// With no headers there is no key header, so /paid/ is a 400; /ip/ uses
	// the source address where the event has one; /free has no policy.
	cases := []want{{"/free", 200}, {"/paid/x", 400}, {"/ip/x", 200}, {"", 400}}

	t.Run("HTTPAPI", func(t *testing.T) {
		e, _ := newEngine(t, testPolicies)
		h := middleware.HTTPAPI(e, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			return events.APIGatewayV2HTTPResponse{StatusCode: 200}, nil
		})
		if resp, err := h(ctx, events.APIGatewayV2HTTPRequest{}); err != nil || resp.StatusCode != 400 {
			t.Errorf("zero event: %d, %v; want 400", resp.StatusCode, err)
		}
		for _, c := range cases {
			ev := events.APIGatewayV2HTTPRequest{RawPath: c.path}
			ev.RequestContext.HTTP.Method = "GET"
			ev.RequestContext.HTTP.SourceIP = "203.0.113.7"
			ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{}}
			resp, err := h(ctx, ev)
			checkNil(t, "HTTPAPI "+c.path, resp.StatusCode, err, c.status, resp.Headers, nil)
		}
	})
	t.Run("FunctionURL", func(t *testing.T) {
		e, _ := newEngine(t, testPolicies)
		h := middleware.FunctionURL(e, func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
			return events.LambdaFunctionURLResponse{StatusCode: 200}, nil
		})
		if resp, err := h(ctx, events.LambdaFunctionURLRequest{}); err != nil || resp.StatusCode != 400 {
			t.Errorf("zero event: %d, %v; want 400", resp.StatusCode, err)
		}
		for _, c := range cases {
			ev := events.LambdaFunctionURLRequest{RawPath: c.path}
			ev.RequestContext.HTTP.Method = "GET"
			ev.RequestContext.HTTP.SourceIP = "203.0.113.7"
			resp, err := h(ctx, ev)
			checkNil(t, "FunctionURL "+c.path, resp.StatusCode, err, c.status, resp.Headers, nil)
		}
	})
	t.Run("RESTAPI", func(t *testing.T) {
		e, _ := newEngine(t, testPolicies)
		h := middleware.RESTAPI(e, func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
			return events.APIGatewayProxyResponse{StatusCode: 200}, nil
		})
		if resp, err := h(ctx, events.APIGatewayProxyRequest{}); err != nil || resp.StatusCode != 400 {
			t.Errorf("zero event: %d, %v; want 400", resp.StatusCode, err)
		}
		for _, c := range cases {
			ev := events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: c.path}
			ev.RequestContext.Identity.SourceIP = "203.0.113.7"
			resp, err := h(ctx, ev)
			checkNil(t, "RESTAPI "+c.path, resp.StatusCode, err, c.status, resp.Headers, resp.MultiValueHeaders)
		}
	})
	t.Run("ALB", func(t *testing.T) {
		e, _ := newEngine(t, testPolicies)
		h := middleware.ALB(e, func(context.Context, events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
			return events.ALBTargetGroupResponse{StatusCode: 200}, nil
		})
		if resp, err := h(ctx, events.ALBTargetGroupRequest{}); err != nil || resp.StatusCode != 400 {
			t.Errorf("zero event: %d, %v; want 400", resp.StatusCode, err)
		}
		for _, c := range cases {
			st := c.status
			if c.path == "/ip/x" {
				st = 400 // no X-Forwarded-For: an ALB event without headers has no client address
			}
			resp, err := h(ctx, events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: c.path})
			checkNil(t, "ALB "+c.path, resp.StatusCode, err, st, resp.Headers, resp.MultiValueHeaders)
			resp, err = h(ctx, events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: c.path,
				MultiValueHeaders: map[string][]string{"x-forwarded-for": nil}})
			checkNil(t, "ALB multi-value "+c.path, resp.StatusCode, err, st, resp.Headers, resp.MultiValueHeaders)
		}
	})
	t.Run("Handler", func(t *testing.T) {
		e, _ := newEngine(t, testPolicies)
		h := middleware.Handler(e, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for _, c := range cases {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, &http.Request{Method: "GET", URL: &url.URL{Path: c.path}, RemoteAddr: "203.0.113.7:1"})
			checkNil(t, "Handler "+c.path, w.Code, nil, c.status, nil, w.Header())
		}
	})
}

func checkNil(t *testing.T, where string, got int, err error, want int, single map[string]string, multi map[string][]string) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: error %v", where, err)
	}
	if got != want {
		t.Errorf("%s: status = %d, want %d", where, got, want)
	}
	h := responseHeaders(single, multi)
	if want == 200 && strings.HasSuffix(where, "/ip/x") && h.Get("RateLimit") == "" {
		t.Errorf("%s: no RateLimit header on a handler response with nil header maps", where)
	}
	if want != 200 && h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("%s: Content-Type = %q, want %q", where, h.Get("Content-Type"), "application/problem+json")
	}
}

// TestEmptyMultiValueHeaders: an event whose multiValueHeaders is present
// but empty is read from its single-value headers.
func TestEmptyMultiValueHeaders(t *testing.T) {
	ctx := context.Background()
	e, _ := newEngine(t, testPolicies)
	rest := middleware.RESTAPI(e, func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{StatusCode: 200}, nil
	})
	ev := events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/paid/x",
		Headers: map[string]string{"X-Api-Key": "k"}, MultiValueHeaders: map[string][]string{}}
	if resp, err := rest(ctx, ev); err != nil || resp.StatusCode != 200 {
		t.Errorf("RESTAPI: %d, %v; want 200", resp.StatusCode, err)
	}
	alb := middleware.ALB(e, func(context.Context, events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
		return events.ALBTargetGroupResponse{StatusCode: 200}, nil
	})
	resp, err := alb(ctx, events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: "/paid/x",
		Headers: map[string]string{"x-api-key": "k"}, MultiValueHeaders: map[string][]string{}})
	if err != nil || resp.StatusCode != 200 || len(resp.MultiValueHeaders["RateLimit"]) != 1 || len(resp.Headers) != 0 {
		t.Errorf("ALB: %d %v %v, %v; want 200 answered in multi-value form", resp.StatusCode, resp.Headers, resp.MultiValueHeaders, err)
	}
}
