package policy_test

import (
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/urlpath"
	"github.com/edgelimit/edgelimit/policy"
)

func TestRouteMatches(t *testing.T) {
	tests := []struct {
		route, method, path string
		want                bool
	}{
		{"GET /paid/*", "GET", "/paid/report", true},
		{"GET /paid/*", "GET", "/paid/a/b/c", true},
		{"GET /paid/*", "GET", "/paid/", true},
		{"GET /paid/*", "GET", "/paid", true}, // "/paid/" trimmed by a router
		{"GET /paid/*", "GET", "/pai", false},
		{"GET /paid/*", "GET", "/paidx/y", false},
		{"GET /paid/*", "POST", "/paid/x", false},
		{"POST /contact", "POST", "/contact", true},
		{"POST /contact", "POST", "/contact/", true},
		{"POST /contact/", "POST", "/contact", true},
		{"POST /contact", "POST", "//contact//", true},
		{"POST /contact", "POST", "/contacts", false},
		{"ANY /contact", "DELETE", "/contact", true},
		{"any /*", "PATCH", "/whatever/deep", true},
		{"get /a", "GET", "/a", true},
	}
	for _, tt := range tests {
		r, err := policy.ParseRoute(tt.route)
		if err != nil {
			t.Fatalf("ParseRoute(%q): %v", tt.route, err)
		}
		if got := r.Matches(tt.method, urlpath.Canonical(tt.path)); got != tt.want {
			t.Errorf("%q.Matches(%s %s) = %v, want %v", tt.route, tt.method, tt.path, got, tt.want)
		}
	}
}

func TestRouteString(t *testing.T) {
	for _, s := range []string{"GET /paid/*", "ANY /contact", "POST /"} {
		r, err := policy.ParseRoute(s)
		if err != nil || r.String() != s {
			t.Errorf("ParseRoute(%q).String() = %q, %v", s, r.String(), err)
		}
	}
}

func TestParseRouteErrors(t *testing.T) {
	for _, s := range []string{"", "GET", "/paid", "GET paid", "FETCH /a", "GET /a*", "GET /a/*/b", "GET /a?b", "GET /a/../b", "GET //a"} {
		if _, err := policy.ParseRoute(s); err == nil {
			t.Errorf("ParseRoute(%q) succeeded, want an error", s)
		}
	}
}

func FuzzRouteMatch(f *testing.F) {
	f.Add("GET /paid/*", "GET", "/paid/x")
	f.Add("ANY /contact", "POST", "/contact")
	f.Add("GET /a/", "GET", "/a/%2e%2e/b")
	f.Add("POST /x/*", "POST", "//x//y/../z")
	f.Fuzz(func(t *testing.T, route, method, path string) {
		r, err := policy.ParseRoute(route)
		clean := urlpath.Canonical(path)
		if clean != "" {
			if !strings.HasPrefix(clean, "/") {
				t.Fatalf("CanonicalPath(%q) = %q does not start with /", path, clean)
			}
			if strings.Contains(clean, "/../") || strings.HasSuffix(clean, "/..") || strings.Contains(clean, "//") || len(clean) > 1 && strings.HasSuffix(clean, "/") {
				t.Fatalf("CanonicalPath(%q) = %q is not canonical", path, clean)
			}
			// Every spelling a router treats alike is matched alike.
			for _, spelling := range []string{clean + "/", "/" + clean, clean + "//", "/." + clean} {
				if c := urlpath.Canonical(spelling); c != clean && !strings.Contains(clean, "%") {
					t.Fatalf("CanonicalPath(%q) = %q, but CanonicalPath(%q) = %q", path, clean, spelling, c)
				}
			}
		}
		if err != nil {
			return
		}
		if _, err := policy.ParseRoute(r.String()); err != nil {
			t.Fatalf("route %q round-trips to %q, which does not parse: %v", route, r.String(), err)
		}
		got := r.Matches(method, clean)
		if got && r.Method != "ANY" && method != r.Method {
			t.Fatalf("%q matched method %q", route, method)
		}
		if got && !r.Prefix && clean != r.Path {
			t.Fatalf("exact %q matched %q", route, clean)
		}
		if clean != "" && r.Matches(method, clean) != r.Matches(method, urlpath.Canonical(clean+"/")) {
			t.Fatalf("%q matches %q and %q differently", route, clean, clean+"/")
		}
	})
}
