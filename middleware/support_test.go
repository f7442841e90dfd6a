package middleware_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
)

// t0 is the fixed instant the tests' limiters count at; it starts a minute
// and an hour, so every window's reset is its full length.
var t0 = time.Unix(1_700_002_800, 0)

// testSecret keys the engine's hash of client keys.
var testSecret = []byte("middleware-test-secret-0123456789abcdef")

// testPolicies is the policy file every scenario runs against.
const testPolicies = `
version: 1
lists:
  - {name: abusers, action: deny, values: ["198.51.100.66", "2001:db8:bad::/48"]}
  - {name: internal, action: allow, match: header:X-Api-Key, routes: ["GET /paid/*"], values: [internal-job]}
policies:
  - name: paid
    routes: ["GET /paid/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 3
    window: 1m
  - name: pair-key
    routes: ["ANY /pair/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 2
    window: 1m
  - name: pair-ip
    routes: ["ANY /pair/*"]
    key: ip
    strategy: durable
    limit: 5
    window: 1h
  - name: by-ip
    routes: ["ANY /ip/*"]
    key: ip
    strategy: durable
    limit: 2
    window: 1m
  - name: by-claim
    routes: ["GET /me"]
    key: claim:sub
    strategy: durable
    limit: 2
    window: 1m
`

// limiters builds the engine's limiters: durablecounter Counters (exact
// fixed windows) on one memory store per engine, at a fixed clock (or the
// real one). A policy named in record is wrapped so that the keys it is
// asked about are kept.
type limiters struct {
	store  *durablecounter.Memory
	now    func() time.Time
	record map[string]*recorder
}

func (ls *limiters) factory(p *policy.Policy) (edgelimit.Limiter, error) {
	c, err := durablecounter.New(durablecounter.Config{Policy: p, Store: ls.store, Now: ls.now})
	if err != nil {
		return nil, err
	}
	if r, ok := ls.record[p.Name]; ok {
		r.Limiter = c // plain Limiter: recording opts the policy out of batching
		return r, nil
	}
	return c, nil
}

// recorder is a Limiter that keeps the keys it is asked about.
type recorder struct {
	edgelimit.Limiter
	mu   sync.Mutex
	keys []string
}

func (r *recorder) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	r.mu.Lock()
	r.keys = append(r.keys, req.Key)
	r.mu.Unlock()
	return r.Limiter.Allow(ctx, req)
}

func (r *recorder) recorded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

// newEngine builds an engine over the policy file text with a fresh memory
// store counting at t0; the policies named in record are recorded.
func newEngine(tb testing.TB, policies string, record ...string) (*edgelimit.Engine, *limiters) {
	tb.Helper()
	return buildEngine(tb, policies, func() time.Time { return t0 }, record...)
}

// buildEngine is newEngine with a clock; nil is the real one.
func buildEngine(tb testing.TB, policies string, now func() time.Time, record ...string) (*edgelimit.Engine, *limiters) {
	tb.Helper()
	f, err := policy.Parse("test.yaml", []byte(policies))
	if err != nil {
		tb.Fatalf("policy.Parse: %v", err)
	}
	ls := &limiters{store: durablecounter.NewMemory(durablecounter.MemoryConfig{}), now: now,
		record: map[string]*recorder{}}
	for _, name := range record {
		ls.record[name] = &recorder{}
	}
	e, err := edgelimit.New(edgelimit.Config{
		Policies:   f,
		Limiters:   ls.factory,
		HashSecret: testSecret,
		Logger:     discardLogger,
		Now:        now,
	})
	if err != nil {
		tb.Fatalf("edgelimit.New: %v", err)
	}
	return e, ls
}

// call is one request in adapter-neutral terms.
type call struct {
	Method string
	Path   string
	IP     string
	// Header holds extra request headers (canonical names); each adapter
	// writes them in the case its event source uses.
	Header map[string]string
	// Sample overrides the adapter's default testdata event.
	Sample string
	// Route is the route the gateway matched (routeKey, resource), for the
	// adapters whose events carry one; default none ($default, /{proxy+}).
	Route string
}

// result is one response in adapter-neutral terms.
type result struct {
	Status int
	Header http.Header // every response header, merged from all maps
	Body   string
	Ran    bool // the wrapped handler ran
	// Verdict is what the handler found in its context.
	Verdict *edgelimit.Verdict
	Err     error
	// Base64 reports IsBase64Encoded on the response.
	Base64 bool
}

// handlerBody is what every wrapped test handler answers with.
const handlerBody = `{"ok":true}`

// adapter runs calls through one wrapper, built on a real event sample.
type adapter struct {
	name   string
	sample string // default testdata file
	claims bool   // the event type can carry authorizer claims
	// build wraps a handler that answers 200 handlerBody with header
	// X-Handler: ran (plus extra), and returns a function that runs calls.
	build func(tb testing.TB, e *edgelimit.Engine, extra map[string]string, fail error) func(call) result
}

func readSample(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatalf("read sample: %v", err)
	}
	return b
}

func decodeSample[T any](tb testing.TB, name string) T {
	tb.Helper()
	var ev T
	if err := json.Unmarshal(readSample(tb, name), &ev); err != nil {
		tb.Fatalf("decode %s: %v", name, err)
	}
	return ev
}

func sampleOr(c call, def string) string {
	if c.Sample != "" {
		return c.Sample
	}
	return def
}

// responseHeaders merges a Lambda response's header maps the way the
// gateway does, without canonicalising values.
func responseHeaders(single map[string]string, multi map[string][]string) http.Header {
	h := http.Header{}
	for k, v := range single {
		h.Add(k, v)
	}
	for k, vs := range multi {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return h
}

// handlerHeaders are the headers the test handlers set.
func handlerHeaders(extra map[string]string) map[string]string {
	h := map[string]string{"X-Handler": "ran", "Content-Type": "application/json"}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

var adapters = []adapter{
	{
		name: "HTTPAPI", sample: "apigw-v2-request-no-authorizer.json", claims: true,
		build: func(tb testing.TB, e *edgelimit.Engine, extra map[string]string, fail error) func(call) result {
			var ran bool
			var verdict *edgelimit.Verdict
			h := middleware.HTTPAPI(e, func(ctx context.Context, _ events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
				ran = true
				verdict, _ = edgelimit.FromContext(ctx)
				return events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: handlerHeaders(extra), Body: handlerBody}, fail
			})
			return func(c call) result {
				ev := decodeSample[events.APIGatewayV2HTTPRequest](tb, sampleOr(c, "apigw-v2-request-no-authorizer.json"))
				ev.RequestContext.HTTP.Method = c.Method
				ev.RawPath, ev.RequestContext.HTTP.Path = c.Path, c.Path
				ev.RouteKey, ev.RequestContext.RouteKey = "$default", "$default"
				if c.Route != "" {
					ev.RouteKey, ev.RequestContext.RouteKey = c.Method+" "+c.Route, c.Method+" "+c.Route
				}
				ev.RequestContext.HTTP.SourceIP = c.IP
				for k, v := range c.Header {
					ev.Headers[strings.ToLower(k)] = v
				}
				ran, verdict = false, nil
				resp, err := h(context.Background(), ev)
				return result{Status: resp.StatusCode, Header: responseHeaders(resp.Headers, resp.MultiValueHeaders),
					Body: resp.Body, Ran: ran, Verdict: verdict, Err: err, Base64: resp.IsBase64Encoded}
			}
		},
	},
	{
		name: "FunctionURL", sample: "lambda-urls-request.json",
		build: func(tb testing.TB, e *edgelimit.Engine, extra map[string]string, fail error) func(call) result {
			var ran bool
			var verdict *edgelimit.Verdict
			h := middleware.FunctionURL(e, func(ctx context.Context, _ events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
				ran = true
				verdict, _ = edgelimit.FromContext(ctx)
				return events.LambdaFunctionURLResponse{StatusCode: 200, Headers: handlerHeaders(extra), Body: handlerBody}, fail
			})
			return func(c call) result {
				ev := decodeSample[events.LambdaFunctionURLRequest](tb, sampleOr(c, "lambda-urls-request.json"))
				ev.RequestContext.HTTP.Method = c.Method
				ev.RawPath, ev.RequestContext.HTTP.Path = c.Path, c.Path
				ev.RequestContext.HTTP.SourceIP = c.IP
				for k, v := range c.Header {
					ev.Headers[strings.ToLower(k)] = v
				}
				ran, verdict = false, nil
				resp, err := h(context.Background(), ev)
				return result{Status: resp.StatusCode, Header: responseHeaders(resp.Headers, nil),
					Body: resp.Body, Ran: ran, Verdict: verdict, Err: err, Base64: resp.IsBase64Encoded}
			}
		},
	},
	{
		name: "RESTAPI", sample: "apigw-request.json", claims: true,
		build: func(tb testing.TB, e *edgelimit.Engine, extra map[string]string, fail error) func(call) result {
			var ran bool
			var verdict *edgelimit.Verdict
			h := middleware.RESTAPI(e, func(ctx context.Context, _ events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
				ran = true
				verdict, _ = edgelimit.FromContext(ctx)
				return events.APIGatewayProxyResponse{StatusCode: 200, Headers: handlerHeaders(extra), Body: handlerBody}, fail
			})
			return func(c call) result {
				ev := decodeSample[events.APIGatewayProxyRequest](tb, sampleOr(c, "apigw-request.json"))
				ev.HTTPMethod, ev.RequestContext.HTTPMethod = c.Method, c.Method
				ev.Path = c.Path
				ev.Resource, ev.RequestContext.ResourcePath = "/{proxy+}", "/{proxy+}"
				if c.Route != "" {
					ev.Resource, ev.RequestContext.ResourcePath = c.Route, c.Route
				}
				ev.RequestContext.Identity.SourceIP = c.IP
				for k, v := range c.Header {
					ev.Headers[k] = v
					ev.MultiValueHeaders[k] = []string{v}
				}
				ran, verdict = false, nil
				resp, err := h(context.Background(), ev)
				return result{Status: resp.StatusCode, Header: responseHeaders(resp.Headers, resp.MultiValueHeaders),
					Body: resp.Body, Ran: ran, Verdict: verdict, Err: err, Base64: resp.IsBase64Encoded}
			}
		},
	},
	albAdapter("ALB", "alb-lambda-target-request-headers-only.json"),
	albAdapter("ALB-multi-value", "alb-lambda-target-request-multivalue-headers.json"),
	{
		name: "Handler",
		build: func(tb testing.TB, e *edgelimit.Engine, extra map[string]string, fail error) func(call) result {
			var ran bool
			var verdict *edgelimit.Verdict
			h := middleware.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran = true
				verdict, _ = edgelimit.FromContext(r.Context())
				for k, v := range handlerHeaders(extra) {
					w.Header()[k] = []string{v} // as set, without canonicalising
				}
				w.WriteHeader(200)
				_, _ = w.Write([]byte(handlerBody))
			}))
			return func(c call) result {
				// Built by hand, as the server would from any request line:
				// httptest.NewRequest refuses the absurd ones.
				r := &http.Request{Method: c.Method, URL: &url.URL{}, Host: "api.example.com",
					Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}}
				r.URL.Path, r.URL.RawPath = pathParts(c.Path)
				r.RemoteAddr = joinHostPort(c.IP)
				r.Header.Set("X-Forwarded-For", "192.0.2.99")
				for k, v := range c.Header {
					r.Header.Set(k, v)
				}
				w := httptest.NewRecorder()
				ran, verdict = false, nil
				h.ServeHTTP(w, r)
				return result{Status: w.Code, Header: w.Header(), Body: w.Body.String(), Ran: ran, Verdict: verdict}
			}
		},
	},
}

func albAdapter(name, sample string) adapter {
	return adapter{
		name: name, sample: sample,
		build: func(tb testing.TB, e *edgelimit.Engine, extra map[string]string, fail error) func(call) result {
			var ran bool
			var verdict *edgelimit.Verdict
			multi := strings.Contains(sample, "multivalue")
			h := middleware.ALB(e, func(ctx context.Context, _ events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
				ran = true
				verdict, _ = edgelimit.FromContext(ctx)
				resp := events.ALBTargetGroupResponse{StatusCode: 200, StatusDescription: "200 OK", Body: handlerBody}
				if multi {
					resp.MultiValueHeaders = map[string][]string{}
					for k, v := range handlerHeaders(extra) {
						resp.MultiValueHeaders[k] = []string{v}
					}
				} else {
					resp.Headers = handlerHeaders(extra)
				}
				return resp, fail
			})
			return func(c call) result {
				ev := decodeSample[events.ALBTargetGroupRequest](tb, sampleOr(c, sample))
				ev.HTTPMethod, ev.Path = c.Method, c.Path
				// The load balancer appends the peer's address to what the
				// client sent.
				xff := "192.0.2.99"
				if v, ok := c.Header["X-Forwarded-For"]; ok {
					xff = v
				}
				xff += ", " + c.IP
				for k, v := range c.Header {
					if multi {
						ev.MultiValueHeaders[strings.ToLower(k)] = []string{v}
					} else {
						ev.Headers[strings.ToLower(k)] = v
					}
				}
				if multi {
					ev.MultiValueHeaders["x-forwarded-for"] = []string{xff}
				} else {
					ev.Headers["x-forwarded-for"] = xff
				}
				ran, verdict = false, nil
				resp, err := h(context.Background(), ev)
				if multi && len(resp.Headers) > 0 {
					tb.Errorf("%s: multi-value request answered with single-value headers %v", name, resp.Headers)
				}
				if !multi && len(resp.MultiValueHeaders) > 0 {
					tb.Errorf("%s: single-value request answered with multi-value headers %v", name, resp.MultiValueHeaders)
				}
				if want := strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode); resp.StatusDescription != want {
					tb.Errorf("%s: StatusDescription = %q for %d", name, resp.StatusDescription, resp.StatusCode)
				}
				return result{Status: resp.StatusCode, Header: responseHeaders(resp.Headers, resp.MultiValueHeaders),
					Body: resp.Body, Ran: ran, Verdict: verdict, Err: err, Base64: resp.IsBase64Encoded}
			}
		},
	}
}

// pathParts splits a raw path into URL.Path and URL.RawPath as net/http
// would parse it from the request line.
func pathParts(raw string) (p, rawPath string) {
	r, err := http.NewRequest("GET", "http://x"+raw, nil)
	if err != nil || !strings.HasPrefix(raw, "/") {
		return raw, ""
	}
	return r.URL.Path, r.URL.RawPath
}

func joinHostPort(ip string) string {
	if ip == "" {
		return ""
	}
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:52000"
	}
	return ip + ":52000"
}

var discardLogger = slog.New(slog.DiscardHandler)
