package edgelimit

import (
	"errors"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/edgelimit/edgelimit/policy"
)

// maxKeyLength bounds a header or claim key value; longer values are
// rejected as bad input rather than hashed.
const maxKeyLength = 1024

// errMissingKey and errBadKey are the private causes of a 400.
var (
	errMissingKey = errors.New("edgelimit: key source missing from request")
	errBadKey     = errors.New("edgelimit: key value unusable")
)

// keyFor hashes a request's raw key for policy c, in the request's memory:
// the Request.Key its limiter gets.
func (e *Engine) keyFor(v *Verdict, c *compiled, raw []byte) string {
	return v.keep(e.appendKey(v.text(), c, raw))
}

// appendKey appends the hash of raw under c: SipHash (keyhash.Local) for
// a policy whose keys never leave the process, HMAC-SHA256 for every other.
// Requests and operators (KeyOf) go through here alike, so they always
// agree on a key.
func (e *Engine) appendKey(dst []byte, c *compiled, raw []byte) []byte {
	if c.localKeys {
		return e.local.Append(dst, c.Name, raw)
	}
	return e.hasher.Append(dst, c.Name, raw)
}

// localKeys reports whether a policy's keys may be hashed with the
// in-process hash: its limiter says its state never leaves the process
// (InProcess), and no other store sees its keys (per-key overrides are
// read from the override store by the HMAC form, which operators set).
func localKeys(p *policy.Policy, l Limiter) bool {
	ip, ok := l.(InProcess)
	return ok && ip.InProcess() && !p.Overrides
}

// rawKey finds the client key of p in the request, before hashing. It
// returns a kind-prefixed value so that equal strings from different sources
// never share a counter.
func rawKey(p *policy.Policy, in *Input, buf []byte) ([]byte, error) {
	switch p.Key.Kind() {
	case policy.KeyGlobal:
		return append(buf, "g:"...), nil
	case policy.KeyIP:
		return ipKey(p, in, buf)
	case policy.KeyHeader, policy.KeyClaim:
		var v string
		if p.Key.Kind() == policy.KeyHeader {
			if in.Header != nil {
				v = in.Header.Get(p.Key.Name())
			}
		} else if in.Claims != nil {
			v = in.Claims.Get(p.Key.Name())
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
		if p.Key.Kind() == policy.KeyHeader {
			buf = append(buf, "h:"...)
		} else {
			buf = append(buf, "c:"...)
		}
		return append(buf, v...), nil
	}
	return nil, errMissingKey
}

func ipKey(p *policy.Policy, in *Input, buf []byte) ([]byte, error) {
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
