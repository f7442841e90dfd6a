package edgelimit

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/netip"
	"strings"
	"sync"
	"unicode/utf8"
)

// KeyKind says where a policy finds the client key.
type KeyKind uint8

// Key kinds.
const (
	KeyIP     KeyKind = iota + 1 // the source address from the request context
	KeyHeader                    // a request header
	KeyClaim                     // a claim of the authorizer's JWT
	KeyGlobal                    // one key for everybody
)

// KeySource is a parsed `key:` field.
type KeySource struct {
	Kind KeyKind
	Name string // header (canonical form) or claim name
}

// MaxKeyLength bounds a header or claim key value; longer values are
// rejected as bad input rather than hashed.
const MaxKeyLength = 1024

// ParseKeySource parses ip, global, header:NAME or claim:NAME.
func ParseKeySource(s string) (KeySource, error) {
	switch s {
	case "ip":
		return KeySource{Kind: KeyIP}, nil
	case "global":
		return KeySource{Kind: KeyGlobal}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	if ok && name != "" {
		switch kind {
		case "header":
			if !validHeaderName(name) {
				return KeySource{}, fmt.Errorf("edgelimit: key %q: %q is not a valid header name", s, name)
			}
			return KeySource{Kind: KeyHeader, Name: canonicalHeader(name)}, nil
		case "claim":
			if len(name) > 128 {
				return KeySource{}, fmt.Errorf("edgelimit: key %q: claim name too long", s)
			}
			return KeySource{Kind: KeyClaim, Name: name}, nil
		}
	}
	return KeySource{}, fmt.Errorf("edgelimit: key %q is not one of ip, global, header:NAME, claim:NAME", s)
}

// String returns the source as written in a policy file.
func (k KeySource) String() string {
	switch k.Kind {
	case KeyIP:
		return "ip"
	case KeyGlobal:
		return "global"
	case KeyHeader:
		return "header:" + k.Name
	case KeyClaim:
		return "claim:" + k.Name
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
	switch p.Key.Kind {
	case KeyGlobal:
		return append(buf, "g:"...), nil
	case KeyIP:
		return ipKey(p, in, buf)
	case KeyHeader, KeyClaim:
		var v string
		if p.Key.Kind == KeyHeader {
			if in.Header != nil {
				v = in.Header.Get(p.Key.Name)
			}
		} else if in.Claims != nil {
			v = in.Claims.Claim(p.Key.Name)
		}
		v = strings.TrimSpace(v)
		if v == "" {
			if p.MissingKeyToIP {
				return ipKey(p, in, buf)
			}
			return nil, errMissingKey
		}
		if len(v) > MaxKeyLength || !utf8.ValidString(v) {
			return nil, errBadKey
		}
		if p.Key.Kind == KeyHeader {
			buf = append(buf, "h:"...)
		} else {
			buf = append(buf, "c:"...)
		}
		return append(buf, v...), nil
	}
	return nil, errMissingKey
}

func ipKey(p *Policy, in *Input, buf []byte) ([]byte, error) {
	ip, ok := ClientIP(in.SourceIP, in.Header, p.TrustedProxies)
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

// ClientIP returns the client's address: the request context's source IP,
// or, when trustedProxies > 0, the address that many hops from the right of
// X-Forwarded-For, not counting the entry the API's own entry point appended
// (API Gateway and ALB append the peer they saw, which is the source IP).
// So trustedProxies is the number of proxies in front of the API: 1 for
// CloudFront before API Gateway. A list too short for that means the
// request bypassed the proxies, and the source IP is the client.
// IPv4-mapped IPv6 addresses are unmapped.
func ClientIP(sourceIP string, h HeaderGetter, trustedProxies int) (netip.Addr, bool) {
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

// MinSecretLength is the shortest secret edgelimit accepts for any key.
const MinSecretLength = 32

// ErrShortSecret is returned for a secret shorter than MinSecretLength.
var ErrShortSecret = fmt.Errorf("edgelimit: secret must be at least %d bytes", MinSecretLength)

// KeyHasher turns client keys into the keyed hashes stored in place of raw
// keys (IP addresses and API keys are personal data and secrets). The same
// secret must be configured on every instance that shares a store.
type KeyHasher struct {
	pool sync.Pool
}

// NewKeyHasher returns a hasher keyed by secret (at least 32 bytes).
func NewKeyHasher(secret []byte) (*KeyHasher, error) {
	if len(secret) < MinSecretLength {
		return nil, ErrShortSecret
	}
	k := append([]byte(nil), secret...)
	h := &KeyHasher{}
	h.pool.New = func() any { return &hashState{mac: hmac.New(sha256.New, k)} }
	return h, nil
}

// maxPooledHashBuf bounds the scratch buffer a pooled hashState keeps.
const maxPooledHashBuf = 4096

// hashState is one pooled HMAC with a scratch buffer, so that Hash hands the
// MAC one slice it owns and nothing of the caller's escapes to the heap.
type hashState struct {
	mac hash.Hash
	buf []byte
}

// RandomSecret returns 32 fresh random bytes.
func RandomSecret() []byte {
	b := make([]byte, MinSecretLength)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return b
}

// HashedKeyLength is the length of a hashed key: 128 bits in base64url.
const HashedKeyLength = 22

// Hash returns the keyed hash of policy and raw key: 128 bits, base64url.
// The policy is mixed in so one client's items cannot be linked across
// policies.
func (h *KeyHasher) Hash(policy string, raw []byte) string {
	s := h.pool.Get().(*hashState)
	b := append(s.buf[:0], policy...)
	b = append(b, 0)
	b = append(b, raw...)
	s.mac.Reset()
	s.mac.Write(b)
	b = s.mac.Sum(b[:0]) // the input is consumed; reuse its space for the sum
	var out [HashedKeyLength]byte
	base64.RawURLEncoding.Encode(out[:], b[:16])
	if cap(b) <= maxPooledHashBuf {
		s.buf = b[:0]
	} else {
		s.buf = nil // do not keep a huge caller's key alive in the pool
	}
	h.pool.Put(s)
	return string(out[:])
}
