package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/middleware"
)

// TestWithoutVerdictContext: with the option the handler's request is the
// one that came (no verdict in its context) while the verdict's headers are
// still set; a request with work after the response (charge: response)
// still carries its verdict, and the cost the handler reports through it
// is what the quota is charged.
func TestWithoutVerdictContext(t *testing.T) {
	const policies = `
version: 1
policies:
  - name: plain
    routes: ["GET /plain"]
    key: ip
    strategy: durable
    limit: 10
    window: 1h
  - name: metered
    routes: ["GET /metered"]
    key: ip
    strategy: durable
    limit: 10
    window: 1h
    charge: response
`
	for _, tc := range []struct {
		name    string
		opts    []middleware.Option
		path    string
		carries bool
	}{
		{"default/plain", nil, "/plain", true},
		{"without/plain", []middleware.Option{middleware.WithoutVerdictContext()}, "/plain", false},
		{"without/metered", []middleware.Option{middleware.WithoutVerdictContext()}, "/metered", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := buildEngine(t, policies, nil)
			var sameRequest, carried bool
			var in *http.Request
			h := middleware.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sameRequest = r == in
				v, ok := edgelimit.FromContext(r.Context())
				carried = ok
				if ok {
					v.ReportCost(4)
				}
			}), tc.opts...)
			in = httptest.NewRequest("GET", tc.path, nil)
			in.RemoteAddr = "192.0.2.7:4000"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, in)
			if carried != tc.carries || sameRequest == tc.carries {
				t.Errorf("the handler's context carries the verdict: %v (the request passed on as it came: %v), want %v",
					carried, sameRequest, tc.carries)
			}
			if w.Header().Get("RateLimit") == "" || w.Header().Get("RateLimit-Policy") == "" {
				t.Errorf("no RateLimit headers on the response: %v", w.Header())
			}
			// The next request's RateLimit shows what the first was charged:
			// 10 - 1 - 1 for plain (its own unit included); for metered, whose
			// charge comes after the response, 10 - 4.
			w = httptest.NewRecorder()
			next := httptest.NewRequest("GET", tc.path, nil)
			next.RemoteAddr = in.RemoteAddr
			h.ServeHTTP(w, next)
			want := `"plain";r=8;t=`
			if tc.path == "/metered" {
				want = `"metered";r=6;t=`
			}
			if got := w.Header().Get("RateLimit"); len(got) < len(want) || got[:len(want)] != want {
				t.Errorf("second response: RateLimit %q, want %s…", got, want)
			}
		})
	}
}
