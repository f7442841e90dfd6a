package middleware

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
)

var mergeFields = []edgelimit.Field{
	{Name: edgelimit.HeaderRateLimit, Value: `"p";r=1;t=60`},
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
	gotm := withMulti(m, mergeFields)
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
	setHeaders(hh, mergeFields, make([]string, len(mergeFields)))
	if want := (http.Header{"Content-Type": {"text/plain"}, "Ratelimit": {`"p";r=1;t=60`}, "Edgelimit-Token": {"tok"}}); !reflect.DeepEqual(hh, want) {
		t.Errorf("setHeaders = %v, want %v", hh, want)
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
	fs := []edgelimit.Field{{Name: edgelimit.HeaderRateLimit, Value: `"p";r=1;t=60`}}
	for name, handler := range map[string]func(w http.ResponseWriter){
		"Flush":              func(w http.ResponseWriter) { w.(http.Flusher).Flush() },
		"ResponseController": func(w http.ResponseWriter) { _ = http.NewResponseController(w).Flush() },
		"WriteHeader":        func(w http.ResponseWriter) { w.WriteHeader(201) },
		"Write":              func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) },
		"nothing":            func(http.ResponseWriter) {},
	} {
		rec := httptest.NewRecorder()
		lw := &limitedWriter{ResponseWriter: rec, fields: fs}
		handler(lw)
		lw.apply()
		if got := rec.Result().Header.Get("RateLimit"); got != `"p";r=1;t=60` {
			t.Errorf("%s: RateLimit = %q", name, got)
		}
	}
	lw := &limitedWriter{ResponseWriter: httptest.NewRecorder(), fields: fs}
	if _, _, err := lw.Hijack(); err == nil {
		t.Errorf("Hijack on a recorder succeeded")
	}
	if lw.Unwrap() == nil {
		t.Errorf("Unwrap = nil")
	}
	// More fields than the writer's own room for values.
	many := make([]edgelimit.Field, 10)
	for i := range many {
		many[i] = edgelimit.Field{Name: "X-F" + string(rune('a'+i)), Value: "v"}
	}
	rec := httptest.NewRecorder()
	lw = &limitedWriter{ResponseWriter: rec, fields: many}
	lw.apply()
	if len(rec.Header()) != 10 {
		t.Errorf("%d headers set, want 10", len(rec.Header()))
	}
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
