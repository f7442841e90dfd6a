package middleware

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

var mergeFields = []edgelimit.Field{
	{Name: "RateLimit", Value: `"p";r=1;t=60`},
	{Name: "Edgelimit-Token", Value: "tok"}, // a limiter's own field
}

// TestMergeRule: every verdict field replaces the handler's header of the
// same name in any case; the handler's other headers are kept; the
// handler's maps are never written to.
func TestMergeRule(t *testing.T) {
	h := map[string]string{"ratelimit": "bogus", "edgelimit-token": "stale", "content-type": "text/plain", "X-Own": "1"}
	before := maps.Clone(h)
	got := withSingle(h, mergeFields)
	want := map[string]string{"RateLimit": `"p";r=1;t=60`, "Edgelimit-Token": "tok", "content-type": "text/plain", "X-Own": "1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("withSingle = %v, want %v", got, want)
	}
	if !reflect.DeepEqual(h, before) {
		t.Errorf("withSingle wrote to the handler's map: %v", h)
	}
	m := map[string][]string{"RATELIMIT": {"bogus"}, "X-Own": {"1"}}
	gotm := withMulti(m, mergeFields, func(i int) []string { return []string{mergeFields[i].Value} })
	wantm := map[string][]string{"RateLimit": {`"p";r=1;t=60`}, "Edgelimit-Token": {"tok"}, "X-Own": {"1"}}
	if !reflect.DeepEqual(gotm, wantm) {
		t.Errorf("withMulti = %v, want %v", gotm, wantm)
	}
	if s := withoutOurs(map[string]string{"ratelimit": "x", "A": "b"}, mergeFields); !reflect.DeepEqual(s, map[string]string{"A": "b"}) {
		t.Errorf("withoutOurs = %v", s)
	}
	same := map[string]string{"A": "b"}
	if s := withoutOurs(same, mergeFields); reflect.ValueOf(s).Pointer() != reflect.ValueOf(same).Pointer() {
		t.Errorf("withoutOurs copied a map with nothing to remove")
	}
	if s := withSingle(same, nil); reflect.ValueOf(s).Pointer() != reflect.ValueOf(same).Pointer() {
		t.Errorf("withSingle copied the map for a verdict without headers")
	}
	hh := http.Header{"Content-Type": {"text/plain"}, "ratelimit": {"bogus"}}
	setHeaders(hh, mergeFields, func(i int) []string { return []string{mergeFields[i].Value} })
	if want := (http.Header{"Content-Type": {"text/plain"}, "Ratelimit": {`"p";r=1;t=60`}, "Edgelimit-Token": {"tok"}}); !reflect.DeepEqual(hh, want) {
		t.Errorf("setHeaders = %v, want %v", hh, want)
	}
}

// TestSetHeadersNonCanonical: a verdict field's name the handler set in
// another spelling is dropped whatever else the map holds, also when the
// lookups that spare the pass over the map could miscount (a field named
// twice, Content-Type among the fields).
func TestSetHeadersNonCanonical(t *testing.T) {
	fields := []edgelimit.Field{{Name: "RateLimit", Value: "a"}, {Name: "RateLimit", Value: "b"}, {Name: "Content-Type", Value: "c"}}
	vals := func(i int) []string { return []string{fields[i].Value} }
	for _, h := range []http.Header{
		{"ratelimit": {"x"}},
		{"Ratelimit": {"y"}, "RATELIMIT": {"x"}},
		{"Content-Type": {"t"}, "ratelimit": {"x"}},
		{"Content-Type": {"t"}, "Ratelimit": {"y"}, "rateLimit": {"x"}},
		{"content-type": {"t"}, "Ratelimit": {"y"}},
		{"X-Own": {"1"}, "ratelimit": {"x"}},
	} {
		in := fmt.Sprint(h)
		setHeaders(h, fields, vals)
		for k := range h {
			if k != "Ratelimit" && k != "Content-Type" && k != "X-Own" {
				t.Errorf("setHeaders(%s) left %q: %v", in, k, h)
			}
		}
		if h.Get("Content-Type") != "c" || h["Ratelimit"] == nil {
			t.Errorf("setHeaders(%s) = %v", in, h)
		}
	}
}

func TestFallbacks(t *testing.T) {
	v := &edgelimit.Verdict{}
	if status(v) != 400 {
		t.Errorf("status of a verdict without one = %d, want 400", status(v))
	}
	if got := body(&edgelimit.Verdict{Status: 429}); got != `{"type":"about:blank","title":"Too Many Requests","status":429}` {
		t.Errorf("body without one = %s", got)
	}
	if got := canonical("x-custom-thing"); got != "X-Custom-Thing" {
		t.Errorf("canonical = %q", got)
	}
	if got := statusDescription(429); got != "429 Too Many Requests" {
		t.Errorf("statusDescription = %q", got)
	}
	iam := &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{}}
	if g := httpAPIClaims(iam); g != nil {
		t.Errorf("IAM authorizer: claims %v, want none", g)
	}
	if got := remoteHost("garbage"); got != "garbage" {
		t.Errorf("remoteHost = %q", got)
	}
}

// TestLimitedWriter: the verdict's headers are on the response however the
// handler first commits it, and the writer unwraps for
// http.ResponseController.
func TestLimitedWriter(t *testing.T) {
	v := allowedVerdict(t, 0)
	for name, handler := range map[string]func(w http.ResponseWriter){
		"Flush":              func(w http.ResponseWriter) { w.(http.Flusher).Flush() },
		"ResponseController": func(w http.ResponseWriter) { _ = http.NewResponseController(w).Flush() },
		"WriteHeader":        func(w http.ResponseWriter) { w.WriteHeader(201) },
		"Write":              func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) },
		"nothing":            func(http.ResponseWriter) {},
	} {
		rec := httptest.NewRecorder()
		lw := &limitedWriter{ResponseWriter: rec, v: v}
		handler(lw)
		lw.apply()
		if got := rec.Result().Header.Get("RateLimit"); got != `"p0";r=9;t=60` {
			t.Errorf("%s: RateLimit = %q", name, got)
		}
	}
	lw := &limitedWriter{ResponseWriter: httptest.NewRecorder(), v: v}
	if _, _, err := lw.Hijack(); err == nil {
		t.Errorf("Hijack on a recorder succeeded")
	}
	if lw.Unwrap() == nil {
		t.Errorf("Unwrap = nil")
	}
	// More fields than the verdict's own room for values: 9 policies'
	// limiter fields beside the five RateLimit fields.
	v = allowedVerdict(t, 9)
	rec := httptest.NewRecorder()
	lw = &limitedWriter{ResponseWriter: rec, v: v}
	lw.apply()
	if n := len(v.Header()); n != 14 || len(rec.Header()) != n {
		t.Errorf("%d headers set, want %d (14)", len(rec.Header()), n)
	}
	for i, f := range v.Header() {
		if got := rec.Header().Get(f.Name); got != f.Value {
			t.Errorf("field %d %s = %q, want %q", i, f.Name, got, f.Value)
		}
	}
}

// allowedVerdict decides one allowed request on a route of max(1, extra)
// policies, the first extra of which add a field of their own.
func allowedVerdict(t *testing.T, extra int) *edgelimit.Verdict {
	t.Helper()
	file := "version: 1\npolicies:\n"
	for i := range max(1, extra) {
		file += fmt.Sprintf("  - {name: p%d, routes: [\"GET /x\"], key: ip, strategy: durable, limit: 10, window: 1m}\n", i)
	}
	pf, err := policy.Parse("t.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	e, err := edgelimit.New(edgelimit.Config{Policies: pf, Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
		return limitertest.LimiterFunc(func(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
			d := edgelimit.Decision{Allowed: true, Limit: 10, Window: time.Minute, Remaining: 9, Reset: time.Minute}
			if extra > 0 {
				d.Response = &edgelimit.Response{Field: edgelimit.Field{Name: "X-Own-" + p.Name, Value: "v-" + p.Name}}
			}
			return d, nil
		}), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	v := e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/x", SourceIP: "192.0.2.1"})
	if !v.Allowed {
		t.Fatalf("not allowed: %s", v.Body)
	}
	return v
}

func TestWrapPanics(t *testing.T) {
	e := &edgelimit.Engine{}
	for name, wrap := range map[string]func(){
		"nil engine": func() {
			HTTPAPI(nil, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
				return events.APIGatewayV2HTTPResponse{}, nil
			})
		},
		"nil handler": func() { FunctionURL(e, nil) },
		"nil next":    func() { Handler(e, nil) },
		"nil ALB":     func() { ALB(e, nil) },
		"nil REST":    func() { RESTAPI(e, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			wrap()
		}()
	}
}

// TestCanonicalNames pins canonical's spelled-out names to net/http's own
// canonical form, for every field name the engine writes.
func TestCanonicalNames(t *testing.T) {
	for _, n := range []string{
		"RateLimit-Policy", "RateLimit", "Retry-After", "X-RateLimit-Limit",
		"X-RateLimit-Remaining", "X-RateLimit-Reset", "Content-Type", "Edgelimit-Token", "x-custom-thing",
	} {
		if got, want := canonical(n), http.CanonicalHeaderKey(n); got != want {
			t.Errorf("canonical(%q) = %q, want net/http's %q", n, got, want)
		}
	}
}

// TestBodyCache: an interned body is the same text, the same string when
// it repeats, and never another body's, also when bodies share a slot
// and goroutines race for it.
func TestBodyCache(t *testing.T) {
	c := newBodyCache()
	a := c.intern([]byte(`{"status":429,"retry-after":5}`))
	b := c.intern([]byte(`{"status":429,"retry-after":5}`))
	if a != `{"status":429,"retry-after":5}` || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("repeated body: %q at %p, %q at %p; want one string", a, unsafe.StringData(a), b, unsafe.StringData(b))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 64)
			for i := range 2000 { // more bodies than slots: they collide
				want := fmt.Sprintf(`{"g":%d,"i":%d}`, g, i%600)
				buf = append(buf[:0], want...)
				if got := c.intern(buf); got != want {
					t.Errorf("intern(%s) = %s", want, got)
					return
				}
				buf[0] = 'x' // the caller's buffer is reused: the string is not
				if got := c.intern([]byte(want)); got != want {
					t.Errorf("intern(%s) after the buffer changed = %s", want, got)
					return
				}
			}
		}()
	}
	wg.Wait()
}
