package policy

import (
	"fmt"
	"path"
	"strings"
)

// methodAny matches every method in a route.
const methodAny = "ANY"

var knownMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", methodAny}

// Route is a "METHOD /path" pattern. A path is matched in its canonical
// form (percent-decoded, dot segments and repeated slashes removed, no
// trailing slash), so "/contact/" and "//contact" are "/contact". A trailing
// "*" matches the path and everything below it: "/paid/*" matches "/paid",
// "/paid/" and "/paid/a/b".
type Route struct {
	Method string // upper case, or ANY
	Path   string // canonical; for a prefix route, with a trailing slash
	Prefix bool   // the pattern ended in *
}

// parseRoute parses "METHOD /path", "METHOD /prefix/*" or "ANY /path".
func ParseRoute(s string) (Route, error) {
	method, p, ok := strings.Cut(strings.TrimSpace(s), " ")
	p = strings.TrimSpace(p)
	if !ok || method == "" || p == "" {
		return Route{}, fmt.Errorf("policy: route %q must be \"METHOD /path\", like \"GET /paid/*\" or \"ANY /contact\"", s)
	}
	m := strings.ToUpper(method)
	known := false
	for _, k := range knownMethods {
		if m == k {
			known = true
		}
	}
	if !known {
		return Route{}, fmt.Errorf("policy: route %q: method %q is not one of %s", s, method, strings.Join(knownMethods, ", "))
	}
	if !strings.HasPrefix(p, "/") {
		return Route{}, fmt.Errorf("policy: route %q: path must start with /", s)
	}
	r := Route{Method: m}
	if before, ok := strings.CutSuffix(p, "*"); ok {
		if !strings.HasSuffix(before, "/") {
			return Route{}, fmt.Errorf("policy: route %q: * may only follow a /, like /paid/*", s)
		}
		r.Prefix, p = true, before
	}
	if strings.ContainsAny(p, "*?#{}% \t") {
		return Route{}, fmt.Errorf("policy: route %q: path may contain * only at the end, and no ?, #, %%, { } or spaces", s)
	}
	clean := path.Clean(p)
	if clean != p && clean+"/" != p {
		return Route{}, fmt.Errorf("policy: route %q: path is not clean; write %q", s, clean)
	}
	r.Path = clean
	if r.Prefix && clean != "/" {
		r.Path = clean + "/"
	}
	return r, nil
}

// String returns the route as written in a policy file.
func (r Route) String() string {
	if r.Prefix {
		return r.Method + " " + r.Path + "*"
	}
	return r.Method + " " + r.Path
}

// Matches reports whether a request with this method and canonical path
// (see the Route documentation) falls under the route.
func (r Route) Matches(method, canonical string) bool {
	if r.Method != methodAny && r.Method != method {
		return false
	}
	if !r.Prefix {
		return canonical == r.Path
	}
	if strings.HasPrefix(canonical, r.Path) {
		return true
	}
	// "/paid/*" also covers "/paid" itself: a router that ignores trailing
	// slashes sends "/paid/" there.
	return len(canonical) == len(r.Path)-1 && strings.HasPrefix(r.Path, canonical)
}
