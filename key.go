package edgelimit

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// keyKind says where a policy finds the client key.
type keyKind uint8

// Key kinds.
const (
	keyIP     keyKind = iota + 1 // the source address from the request context
	keyHeader                    // a request header
	keyClaim                     // a claim of the authorizer's JWT
	keyGlobal                    // one key for everybody
)

// KeySource says where a policy (a tier, a list) finds a value of the
// request: its source address (ip), a header (header:NAME), a claim of the
// authorizer's JWT (claim:NAME), or one value for everybody (global). Its
// String is the policy file's spelling.
type KeySource struct {
	kind keyKind
	name string // header (canonical form) or claim name
}

// maxKeyLength bounds a header or claim key value; longer values are
// rejected as bad input rather than hashed.
const maxKeyLength = 1024

// parseKeySource parses ip, global, header:NAME or claim:NAME.
func parseKeySource(s string) (KeySource, error) {
	switch s {
	case "ip":
		return KeySource{kind: keyIP}, nil
	case "global":
		return KeySource{kind: keyGlobal}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	if ok && name != "" {
		switch kind {
		case "header":
			if !validHeaderName(name) {
				return KeySource{}, fmt.Errorf("edgelimit: key %q: %q is not a valid header name", s, name)
			}
			return KeySource{kind: keyHeader, name: canonicalHeader(name)}, nil
		case "claim":
			if len(name) > 128 {
				return KeySource{}, fmt.Errorf("edgelimit: key %q: claim name too long", s)
			}
			return KeySource{kind: keyClaim, name: name}, nil
		}
	}
	return KeySource{}, fmt.Errorf("edgelimit: key %q is not one of ip, global, header:NAME, claim:NAME", s)
}

// String returns the source as written in a policy file.
func (k KeySource) String() string {
	switch k.kind {
	case keyIP:
		return "ip"
	case keyGlobal:
		return "global"
	case keyHeader:
		return "header:" + k.name
	case keyClaim:
		return "claim:" + k.name
	}
	return ""
}

func validHeaderName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func canonicalHeader(s string) string {
	b := []byte(strings.ToLower(s))
	upper := true
	for i, c := range b {
		if upper && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		upper = c == '-'
	}
	return string(b)
}

// errMissingKey and errBadKey are the private causes of a 400.
var (
	errMissingKey = errors.New("edgelimit: key source missing from request")
	errBadKey     = errors.New("edgelimit: key value unusable")
)

// rawKey finds the client key of p in the request, before hashing. It
// returns a kind-prefixed value so that equal strings from different sources
// never share a counter.
func rawKey(p *Policy, in *Input, buf []byte) ([]byte, error) {
	switch p.Key.kind {
	case keyGlobal:
		return append(buf, "g:"...), nil
	case keyIP:
		return ipKey(p, in, buf)
	case keyHeader, keyClaim:
		var v string
		if p.Key.kind == keyHeader {
			if in.Header != nil {
				v = in.Header.Get(p.Key.name)
			}
		} else if in.Claims != nil {
			v = in.Claims.Get(p.Key.name)
		}
		v = strings.TrimSpace(v)
		if v == "" {
			if p.MissingKeyToIP {
				return ipKey(p, in, buf)
			}
			return nil, errMissingKey
		}
		if len(v) > maxKeyLength || !utf8.ValidString(v) {
			return nil, errBadKey
		}
		if p.Key.kind == keyHeader {
			buf = append(buf, "h:"...)
		} else {
			buf = append(buf, "c:"...)
		}
		return append(buf, v...), nil
	}
	return nil, errMissingKey
}

func ipKey(p *Policy, in *Input, buf []byte) ([]byte, error) {
	ip, ok := clientIP(in.SourceIP, in.Header, p.TrustedProxies)
	if !ok {
		return nil, errBadKey
	}
	prefix, err := ip.Prefix(prefixBits(ip, p.IPv6Prefix))
	if err != nil {
		return nil, errBadKey
	}
	buf = append(buf, "i:"...)
	return prefix.AppendText(buf)
}

func prefixBits(ip netip.Addr, v6 int) int {
	if ip.Is4() {
		return 32
	}
	if v6 == 0 {
		return 64
	}
	return v6
}

// clientIP returns the client's address: the request context's source IP,
// or, when trustedProxies > 0, the address that many hops from the right of
// X-Forwarded-For, not counting the entry the API's own entry point appended
// (API Gateway and ALB append the peer they saw, which is the source IP).
// So trustedProxies is the number of proxies in front of the API: 1 for
// CloudFront before API Gateway. A list too short for that means the
// request bypassed the proxies, and the source IP is the client.
// IPv4-mapped IPv6 addresses are unmapped.
func clientIP(sourceIP string, h Getter, trustedProxies int) (netip.Addr, bool) {
	s := sourceIP
	if trustedProxies > 0 && h != nil {
		if xff := h.Get("X-Forwarded-For"); xff != "" && len(xff) <= 8192 {
			if i := strings.LastIndexByte(xff, ','); strings.TrimSpace(xff[i+1:]) == sourceIP {
				if i < 0 {
					xff = ""
				} else {
					xff = xff[:i]
				}
			}
			if hop, ok := nthFromRight(xff, trustedProxies); ok && xff != "" {
				s = hop
			}
		}
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap().WithZone(""), true
}

func nthFromRight(list string, n int) (string, bool) {
	for i := 1; ; i++ {
		j := strings.LastIndexByte(list, ',')
		item := list[j+1:]
		if i == n {
			return strings.TrimSpace(item), true
		}
		if j < 0 {
			return "", false
		}
		list = list[:j]
	}
}
