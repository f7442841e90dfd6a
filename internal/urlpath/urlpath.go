// Package urlpath is the one canonical form of a request path that the
// engine matches routes against and the example functions dispatch on, so
// that the limiter and the handler can never disagree on which route a
// spelling of a path is.
package urlpath

import (
	"net/url"
	"path"
	"strings"
)

// Canonical returns the form of a request path that routes are matched
// against: percent-escapes decoded, dot segments resolved, repeated slashes
// and a trailing slash removed. Every spelling a router (the example
// functions' trims slashes; net/http's ServeMux cleans paths and decodes
// segments; API Gateway decodes escapes) could send to one handler has the
// same canonical form, so no spelling escapes that handler's policies. It
// returns "" for a path that does not start with / or does not decode.
func Canonical(p string) string {
	if p == "" || p[0] != '/' {
		return ""
	}
	if !needsCleaning(p) {
		return p
	}
	if strings.IndexByte(p, '%') >= 0 {
		dec, err := url.PathUnescape(p)
		if err != nil {
			return ""
		}
		p = dec
	}
	if p == "" || p[0] != '/' {
		return ""
	}
	return path.Clean(p)
}

// needsCleaning is the fast path: most paths are already canonical.
func needsCleaning(p string) bool {
	n := len(p)
	if n > 1 && p[n-1] == '/' {
		return true
	}
	for i := 0; i < n; i++ {
		switch p[i] {
		case '%':
			return true
		case '/':
			if i+1 < n && (p[i+1] == '/' || p[i+1] == '.') {
				return true
			}
		}
	}
	return false
}
