package urlpath

import "testing"

// Every spelling of a path that a router
// sends to one handler must be matched as that handler's route: encoded
// dot segments, doubled and trailing slashes, percent-encoding.
func TestCanonicalPath(t *testing.T) {
	tests := map[string]string{
		"/paid/x":               "/paid/x",
		"/public/../paid/x":     "/paid/x",
		"/public/%2e%2e/paid/x": "/paid/x",
		"/p%61id//x":            "/paid/x",
		"/paid/./x/":            "/paid/x",
		"/contact/":             "/contact",
		"//contact":             "/contact",
		"/contact//":            "/contact",
		"/./contact":            "/contact",
		"/x/../contact":         "/contact",
		"/%63ontact":            "/contact",
		"/contact%2F":           "/contact",
		"/contact/.":            "/contact",
		"/../../etc":            "/etc",
		"/":                     "/",
		"//":                    "/",
		"/a%zz":                 "",
		"":                      "",
		"relative":              "",
		"%2Fx":                  "",
	}
	for in, want := range tests {
		if got := Canonical(in); got != want {
			t.Errorf("CanonicalPath(%q) = %q, want %q", in, got, want)
		}
	}
}
