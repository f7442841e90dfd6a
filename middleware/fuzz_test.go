package middleware_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/middleware"
)

// fuzzPolicies adds a catch-all policy to the test policies so that every
// fuzzed path is decided by at least one limiter.
const fuzzPolicies = testPolicies + `
  - name: everyone
    routes: ["ANY /*"]
    key: ip
    strategy: durable
    limit: 100000
    window: 1m
  - name: by-tenant
    routes: ["ANY /paid/*"]
    key: claim:tenant
    on_missing_key: ip
    strategy: durable
    limit: 100000
    window: 1m
    trusted_proxies: 1
`

// addSeeds adds the named samples and a few hand-broken variants of them.
func addSeeds(f *testing.F, samples ...string) {
	for _, s := range samples {
		b := readSample(f, s)
		f.Add(b)
		// The same event on other routes, methods and keys.
		str := string(b)
		for _, r := range []*strings.Replacer{
			strings.NewReplacer("/paid/report", "/public/%2e%2e/paid/x"),
			strings.NewReplacer("/paid/report", "/me", `"GET"`, `"get"`),
			strings.NewReplacer("/paid/report", "/pair/x", `"accept"`, `"x-api-key"`, `"Accept"`, `"X-Api-Key"`),
			strings.NewReplacer("/paid/report", "/ip/x", "203.0.113.7", "2001:db8::1"),
			strings.NewReplacer("/paid/report", "paid", "203.0.113.7", "not-an-ip"),
			strings.NewReplacer(`"headers"`, `"x-headers"`, `"multiValueHeaders"`, `"x-multiValueHeaders"`, `"requestContext"`, `"x"`),
		} {
			f.Add([]byte(r.Replace(str)))
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"requestContext":{"authorizer":{"lambda":{"tenant":{"a":1}}}}}`))
	f.Add([]byte(`{"httpMethod":"GET","path":"/paid/x","headers":null,"multiValueHeaders":{"x-api-key":[]}}`))
}

// checkFuzz asserts what must hold for any event: no error, a status the
// handler gave (200) or a 400 or 429 with a problem body, never a 5xx.
func checkFuzz(t *testing.T, status int, ran bool, err error, h http.Header, body string) {
	t.Helper()
	if err != nil {
		t.Fatalf("error %v", err)
	}
	switch status {
	case 200:
		if !ran {
			t.Fatalf("status 200 without running the handler")
		}
		return
	case 400, 429:
	default:
		t.Fatalf("status %d, want 200 from the handler, 400 or 429 (body %s)", status, body)
	}
	if ran {
		t.Fatalf("status %d but the handler ran", status)
	}
	if ct := h.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d with Content-Type %q", status, ct)
	}
	var p limitertest.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Status != status {
		t.Fatalf("status %d with body %q (%v)", status, body, err)
	}
	if status == 429 && h.Get("Retry-After") == "" {
		t.Fatalf("429 without Retry-After")
	}
}

func FuzzHTTPAPI(f *testing.F) {
	addSeeds(f, "apigw-v2-request-no-authorizer.json", "apigw-v2-request-jwt-authorizer.json", "apigw-v2-request-lambda-authorizer.json")
	e, _ := newEngine(f, fuzzPolicies)
	var ran bool
	h := middleware.HTTPAPI(e, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		ran = true
		return events.APIGatewayV2HTTPResponse{StatusCode: 200}, nil
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev events.APIGatewayV2HTTPRequest
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		ran = false
		resp, err := h(context.Background(), ev)
		checkFuzz(t, resp.StatusCode, ran, err, responseHeaders(resp.Headers, resp.MultiValueHeaders), resp.Body)
	})
}

func FuzzFunctionURL(f *testing.F) {
	addSeeds(f, "lambda-urls-request.json")
	e, _ := newEngine(f, fuzzPolicies)
	var ran bool
	h := middleware.FunctionURL(e, func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		ran = true
		return events.LambdaFunctionURLResponse{StatusCode: 200}, nil
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev events.LambdaFunctionURLRequest
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		ran = false
		resp, err := h(context.Background(), ev)
		checkFuzz(t, resp.StatusCode, ran, err, responseHeaders(resp.Headers, nil), resp.Body)
	})
}

func FuzzRESTAPI(f *testing.F) {
	addSeeds(f, "apigw-request.json", "apigw-request-cognito.json")
	e, _ := newEngine(f, fuzzPolicies)
	var ran bool
	h := middleware.RESTAPI(e, func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		ran = true
		return events.APIGatewayProxyResponse{StatusCode: 200, Headers: map[string]string{"ratelimit": "x"}}, nil
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev events.APIGatewayProxyRequest
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		ran = false
		resp, err := h(context.Background(), ev)
		checkFuzz(t, resp.StatusCode, ran, err, responseHeaders(resp.Headers, resp.MultiValueHeaders), resp.Body)
	})
}

func FuzzALB(f *testing.F) {
	addSeeds(f, "alb-lambda-target-request-headers-only.json", "alb-lambda-target-request-multivalue-headers.json")
	e, _ := newEngine(f, fuzzPolicies)
	var ran bool
	h := middleware.ALB(e, func(context.Context, events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
		ran = true
		return events.ALBTargetGroupResponse{StatusCode: 200}, nil
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev events.ALBTargetGroupRequest
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		ran = false
		resp, err := h(context.Background(), ev)
		checkFuzz(t, resp.StatusCode, ran, err, responseHeaders(resp.Headers, resp.MultiValueHeaders), resp.Body)
		if multi := ev.MultiValueHeaders != nil; multi && len(resp.Headers) > 0 || !multi && ev.Headers != nil && len(resp.MultiValueHeaders) > 0 {
			t.Fatalf("answered in the other header form: headers %v, multiValueHeaders %v", resp.Headers, resp.MultiValueHeaders)
		}
	})
}

// FuzzHandler fuzzes the parts of an http.Request a client controls.
func FuzzHandler(f *testing.F) {
	f.Add("GET", "/paid/report", "key-1", "192.0.2.99", "203.0.113.7:443")
	f.Add("GET", "/public/%2e%2e/paid/x", "key-1", "", "[2001:db8::1]:80")
	f.Add("get", "paid", "\xff", "1.2.3.4, 5.6.7.8", "garbage")
	f.Add("POST", "/pair/x", "", strings.Repeat("1.1.1.1,", 100), "")
	e, _ := newEngine(f, fuzzPolicies)
	var ran bool
	h := middleware.Handler(e, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	f.Fuzz(func(t *testing.T, method, rawPath, key, xff, remote string) {
		u := &url.URL{Path: rawPath}
		if p, err := url.PathUnescape(rawPath); err == nil {
			u.Path, u.RawPath = p, rawPath
		}
		r := &http.Request{Method: method, URL: u, Header: http.Header{}, RemoteAddr: remote}
		r.Header.Set("X-Api-Key", key)
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		ran = false
		h.ServeHTTP(w, r)
		checkFuzz(t, w.Code, ran, nil, w.Header(), w.Body.String())
	})
}
