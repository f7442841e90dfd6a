package edgelimit_test

import (
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit"
)

func TestRouteMatches(t *testing.T) {
	tests := []struct {
		route, method, path string
		want                bool
	}{
		{"GET /paid/*", "GET", "/paid/report", true},
		{"GET /paid/*", "GET", "/paid/a/b/c", true},
		{"GET /paid/*", "GET", "/paid/", true},
		{"GET /paid/*", "GET", "/paid", false},
		{"GET /paid/*", "GET", "/paidx/y", false},
		{"GET /paid/*", "POST", "/paid/x", false},
		{"POST /contact", "POST", "/contact", true},
		{"POST /contact", "POST", "/contact/", false},
		{"POST /contact", "POST", "/contacts", false},
		{"ANY /contact", "DELETE", "/contact", true},
		{"any /*", "PATCH", "/whatever/deep", true},
		{"get /a", "GET", "/a", true},
	}
	for _, tt := range tests {
		r, err := edgelimit.ParseRoute(tt.route)
		if err != nil {
			t.Fatalf("ParseRoute(%q): %v", tt.route, err)
		}
		if got := r.Matches(tt.method, edgelimit.CleanPath(tt.path)); got != tt.want {
			t.Errorf("%q.Matches(%s %s) = %v, want %v", tt.route, tt.method, tt.path, got, tt.want)
		}
	}
}

func TestRouteString(t *testing.T) {
	for _, s := range []string{"GET /paid/*", "ANY /contact", "POST /"} {
		r, err := edgelimit.ParseRoute(s)
		if err != nil || r.String() != s {
			t.Errorf("ParseRoute(%q).String() = %q, %v", s, r.String(), err)
		}
	}
}

func TestParseRouteErrors(t *testing.T) {
	for _, s := range []string{"", "GET", "/paid", "GET paid", "FETCH /a", "GET /a*", "GET /a/*/b", "GET /a?b", "GET /a/../b", "GET //a"} {
		if _, err := edgelimit.ParseRoute(s); err == nil {
			t.Errorf("ParseRoute(%q) succeeded, want an error", s)
		}
	}
}

// Regression: encoded dot segments and doubled slashes must not let a
// request escape the route that limits it.
func TestCleanPath(t *testing.T) {
	tests := map[string]string{
		"/paid/x":               "/paid/x",
		"/public/../paid/x":     "/paid/x",
		"/public/%2e%2e/paid/x": "/paid/x",
		"/p%61id//x":            "/paid/x",
		"/paid/./x/":            "/paid/x/",
		"/../../etc":            "/etc",
		"/":                     "/",
		"/a%zz":                 "",
		"":                      "",
		"relative":              "",
	}
	for in, want := range tests {
		if got := edgelimit.CleanPath(in); got != want {
			t.Errorf("CleanPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzRouteMatch(f *testing.F) {
	f.Add("GET /paid/*", "GET", "/paid/x")
	f.Add("ANY /contact", "POST", "/contact")
	f.Add("GET /a/", "GET", "/a/%2e%2e/b")
	f.Add("POST /x/*", "POST", "//x//y/../z")
	f.Fuzz(func(t *testing.T, route, method, path string) {
		r, err := edgelimit.ParseRoute(route)
		clean := edgelimit.CleanPath(path)
		if clean != "" {
			if !strings.HasPrefix(clean, "/") {
				t.Fatalf("CleanPath(%q) = %q does not start with /", path, clean)
			}
			if strings.Contains(clean, "/../") || strings.HasSuffix(clean, "/..") || strings.Contains(clean, "//") {
				t.Fatalf("CleanPath(%q) = %q is not clean", path, clean)
			}
			if again := edgelimit.CleanPath(clean); again != clean && !strings.Contains(clean, "%") {
				t.Fatalf("CleanPath not idempotent: %q -> %q -> %q", path, clean, again)
			}
		}
		if err != nil {
			return
		}
		if _, err := edgelimit.ParseRoute(r.String()); err != nil {
			t.Fatalf("route %q round-trips to %q, which does not parse: %v", route, r.String(), err)
		}
		got := r.Matches(method, clean)
		if got && r.Method != edgelimit.MethodAny && method != r.Method {
			t.Fatalf("%q matched method %q", route, method)
		}
		if got && !r.Prefix && clean != r.Path {
			t.Fatalf("exact %q matched %q", route, clean)
		}
	})
}
