package edgelimit

import (
	"net/http"
	"strings"
)

// Input is the adapter-neutral view of an incoming request: what every
// adapter (API Gateway v1/v2, Function URL, ALB, net/http) extracts from its
// event before the engine decides.
type Input struct {
	Method string
	// Path is the request path as received (its canonical form is matched,
	// see Route).
	Path string
	// Route, when the event says which route an API gateway matched, is that
	// route: an HTTP API routeKey ("GET /paid/{resource}") or a REST API
	// resource ("/paid/{resource}"). The policies of the routes that match it
	// guard the request too, so the limiter and the gateway never disagree in
	// the client's favour. Empty ("$default" included) when unknown.
	Route string
	// SourceIP is the client address from the event's request context (the
	// TCP peer for net/http), never from a header.
	SourceIP string
	Header   HeaderGetter
	// Claims are the authorizer's JWT claims, if any.
	Claims ClaimGetter
}

// HeaderGetter looks a request header up by name, case-insensitively.
type HeaderGetter interface {
	Get(name string) string
}

// ClaimGetter looks an authorizer claim up by name.
type ClaimGetter interface {
	Claim(name string) string
}

// MapHeaders adapts a Lambda event's single-value header map, whose keys may
// be in any case (API Gateway v2 lower-cases them, v1 keeps the client's).
type MapHeaders map[string]string

// Get returns the value of name, matching case-insensitively.
func (m MapHeaders) Get(name string) string {
	if v, ok := m[name]; ok {
		return v
	}
	var buf [maxLowerName]byte
	if lower, ok := lowerASCII(&buf, name); ok {
		if v, ok := m[string(lower)]; ok { // no allocation: the key is only looked up
			return v
		}
	} else if v, ok := m[strings.ToLower(name)]; ok {
		return v
	}
	for k, v := range m {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// maxLowerName is the longest header name lowerASCII lowers on the stack.
const maxLowerName = 64

// lowerASCII writes name in lower case into buf and returns it, without
// allocating. It reports false for a name that is too long or not ASCII,
// which the caller lowers with strings.ToLower as before.
func lowerASCII(buf *[maxLowerName]byte, name string) ([]byte, bool) {
	if len(name) > len(buf) {
		return nil, false
	}
	b := buf[:len(name)]
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 0x80 {
			return nil, false
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	return b, true
}

// MultiMapHeaders adapts a multi-value header map (API Gateway v1, ALB with
// multi-value headers). Repeated values are joined with ", ".
type MultiMapHeaders map[string][]string

// Get returns the values of name joined, matching case-insensitively.
func (m MultiMapHeaders) Get(name string) string {
	vs, ok := m[name]
	if !ok {
		var buf [maxLowerName]byte
		if lower, ascii := lowerASCII(&buf, name); ascii {
			vs, ok = m[string(lower)]
		} else {
			vs, ok = m[strings.ToLower(name)]
		}
	}
	if !ok {
		for k, v := range m {
			if strings.EqualFold(k, name) {
				vs, ok = v, true
				break
			}
		}
	}
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	return strings.Join(vs, ", ")
}

// HTTPHeaders adapts net/http headers; repeated values are joined with ", ".
type HTTPHeaders http.Header

// Get returns the values of name joined with ", ".
func (h HTTPHeaders) Get(name string) string {
	vs := http.Header(h).Values(name)
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	return strings.Join(vs, ", ")
}

// MapClaims adapts a string claim map (API Gateway v2 JWT authorizer).
type MapClaims map[string]string

// Claim returns the claim's value or "".
func (m MapClaims) Claim(name string) string { return m[name] }
