package middleware

import (
	"net/http"
	"strings"
)

// The request views the adapters hand the engine (edgelimit.Getter).

// mapHeaders adapts a Lambda event's single-value header map, whose keys may
// be in any case (API Gateway v2 lower-cases them, v1 keeps the client's).
type mapHeaders map[string]string

// Get returns the value of name, matching case-insensitively.
func (m mapHeaders) Get(name string) string {
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

// multiMapHeaders adapts a multi-value header map (API Gateway v1, ALB with
// multi-value headers). Repeated values are joined with ", ".
type multiMapHeaders map[string][]string

// Get returns the values of name joined, matching case-insensitively.
func (m multiMapHeaders) Get(name string) string {
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

// httpHeaders adapts net/http headers; repeated values are joined with ", ".
type httpHeaders http.Header

// Get returns the values of name joined with ", ". A name already in
// net/http's canonical form (as policies usually spell it, "X-Api-Key") is
// looked up as it is, without canonicalizing it again.
func (h httpHeaders) Get(name string) string {
	vs, ok := h[name]
	if !ok {
		vs = http.Header(h).Values(name)
	}
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	return strings.Join(vs, ", ")
}

// mapClaims adapts a string claim map (API Gateway v2 JWT authorizer).
type mapClaims map[string]string

// Get returns the claim's value or "".
func (m mapClaims) Get(name string) string { return m[name] }
