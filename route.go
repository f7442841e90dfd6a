package edgelimit

import (
	"fmt"
	"net/url"
	"path"
	"strings"
)

// MethodAny matches every method in a route.
const MethodAny = "ANY"

var knownMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", MethodAny}

// Route is a "METHOD /path" pattern. A trailing "*" matches the rest of the
// path, including nothing: "/paid/*" matches "/paid/" and "/paid/a/b" but not
// "/paid".
type Route struct {
	Method string // upper case, or ANY
	Path   string // without the trailing *
	Prefix bool   // the pattern ended in *
}

// ParseRoute parses "METHOD /path", "METHOD /prefix/*" or "ANY /path".
func ParseRoute(s string) (Route, error) {
	method, p, ok := strings.Cut(strings.TrimSpace(s), " ")
	p = strings.TrimSpace(p)
	if !ok || method == "" || p == "" {
		return Route{}, fmt.Errorf("edgelimit: route %q must be \"METHOD /path\", like \"GET /paid/*\" or \"ANY /contact\"", s)
	}
	m := strings.ToUpper(method)
	known := false
	for _, k := range knownMethods {
		if m == k {
			known = true
		}
	}
	if !known {
		return Route{}, fmt.Errorf("edgelimit: route %q: method %q is not one of %s", s, method, strings.Join(knownMethods, ", "))
	}
	if !strings.HasPrefix(p, "/") {
		return Route{}, fmt.Errorf("edgelimit: route %q: path must start with /", s)
	}
	r := Route{Method: m}
	if before, ok := strings.CutSuffix(p, "*"); ok {
		if !strings.HasSuffix(before, "/") {
			return Route{}, fmt.Errorf("edgelimit: route %q: * may only follow a /, like /paid/*", s)
		}
		r.Prefix, p = true, before
	}
	if strings.ContainsAny(p, "*?#{} \t") {
		return Route{}, fmt.Errorf("edgelimit: route %q: path may contain * only at the end, and no ?, #, { } or spaces", s)
	}
	if clean := CleanPath(p); clean != p && clean+"/" != p {
		return Route{}, fmt.Errorf("edgelimit: route %q: path is not clean; write %q", s, clean)
	}
	r.Path = p
	return r, nil
}

// String returns the route as written in a policy file.
func (r Route) String() string {
	if r.Prefix {
		return r.Method + " " + r.Path + "*"
	}
	return r.Method + " " + r.Path
}

// Matches reports whether a request with this method and cleaned path falls
// under the route.
func (r Route) Matches(method, cleanPath string) bool {
	if r.Method != MethodAny && r.Method != method {
		return false
	}
	if r.Prefix {
		return strings.HasPrefix(cleanPath, r.Path)
	}
	return cleanPath == r.Path
}

// specificity orders routes for labelling: exact before prefix, longer first.
func (r Route) specificity() int {
	n := len(r.Path) * 2
	if !r.Prefix {
		n++
	}
	if r.Method != MethodAny {
		n += 1 << 20
	}
	return n
}

// CleanPath decodes percent-escapes and removes dot segments and repeated
// slashes, keeping a trailing slash, so that "/public/../paid/x" and
// "/p%61id//x" are matched as "/paid/x". It returns "" for a path that does
// not start with / or does not decode.
func CleanPath(p string) string {
	if p == "" || p[0] != '/' {
		return ""
	}
	if needsCleaning(p) {
		if strings.IndexByte(p, '%') >= 0 {
			dec, err := url.PathUnescape(p)
			if err != nil {
				return ""
			}
			p = dec
		}
		trailing := strings.HasSuffix(p, "/")
		p = path.Clean(p)
		if trailing && p != "/" {
			p += "/"
		}
	}
	return p
}

// needsCleaning is the fast path: most paths are already clean.
func needsCleaning(p string) bool {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '%':
			return true
		case '/':
			if i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.') {
				return true
			}
		case '.':
			if i > 0 && p[i-1] == '/' {
				return true
			}
		}
	}
	return false
}
