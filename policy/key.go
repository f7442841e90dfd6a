package policy

import (
	"fmt"
	"strings"
)

// KeyKind says where a key source finds its value.
type KeyKind uint8

// Key kinds.
const (
	// KeyIP is the source address from the request context.
	KeyIP KeyKind = iota + 1
	// KeyHeader is a request header.
	KeyHeader
	// KeyClaim is a claim of the authorizer's JWT.
	KeyClaim
	// KeyGlobal is one key for everybody.
	KeyGlobal
)

// KeySource says where a policy (a tier, a list) finds a value of the
// request: its source address (ip), a header (header:NAME), a claim of the
// authorizer's JWT (claim:NAME), or one value for everybody (global). Its
// String is the policy file's spelling.
type KeySource struct {
	kind KeyKind
	name string // header (canonical form) or claim name
}

// Kind says where the value comes from.
func (k KeySource) Kind() KeyKind { return k.kind }

// Name is the header's name (in canonical form) or the claim's; "" for ip
// and global.
func (k KeySource) Name() string { return k.name }

// ParseKeySource parses ip, global, header:NAME or claim:NAME.
func ParseKeySource(s string) (KeySource, error) {
	switch s {
	case "ip":
		return KeySource{kind: KeyIP}, nil
	case "global":
		return KeySource{kind: KeyGlobal}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	if ok && name != "" {
		switch kind {
		case "header":
			if !validHeaderName(name) {
				return KeySource{}, fmt.Errorf("policy: key %q: %q is not a valid header name", s, name)
			}
			return KeySource{kind: KeyHeader, name: canonicalHeader(name)}, nil
		case "claim":
			if len(name) > 128 {
				return KeySource{}, fmt.Errorf("policy: key %q: claim name too long", s)
			}
			return KeySource{kind: KeyClaim, name: name}, nil
		}
	}
	return KeySource{}, fmt.Errorf("policy: key %q is not one of ip, global, header:NAME, claim:NAME", s)
}

// String returns the source as written in a policy file.
func (k KeySource) String() string {
	switch k.kind {
	case KeyIP:
		return "ip"
	case KeyGlobal:
		return "global"
	case KeyHeader:
		return "header:" + k.name
	case KeyClaim:
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
