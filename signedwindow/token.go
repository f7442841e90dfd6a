package signedwindow

import (
	"crypto/hmac"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgelimit/edgelimit/pow"
)

// MaxTokenLength bounds a token; a longer one is treated as absent. It is
// the engine's bound on the whole Edgelimit-Token header (4 KiB).
const MaxTokenLength = 4096

// maxCandidates bounds how many comma-separated tokens or proofs of one
// header are tried.
const maxCandidates = 8

// Claims are the typed claims of a window token. On the wire:
//
//	{"aud":"tts","sub":"<hashed client key>","jti":"<16 base64url>","nbf":1700000000,"exp":1700000060,"n":3}
type Claims struct {
	// Policy is the policy the token is for (aud).
	Policy string
	// Subject is the hashed client key it was issued to (sub).
	Subject string
	// ID names the token chain (jti): a proof-of-work window is named by its
	// challenge's salt, a free window by random bytes. Each count of a chain
	// is spent once per instance.
	ID pow.ID
	// Start is the window start (nbf).
	Start time.Time
	// Expires is the window end (exp).
	Expires time.Time
	// Count is the units already spent in the window (n).
	Count int64
}

// hs256 is HMAC-SHA256 as a jwt.SigningMethod whose key is a *ringKey: it
// reuses the key's pooled HMAC states instead of keying a new HMAC per
// token, and compares in constant time. It is installed by the key func only
// after jwt.WithValidMethods accepted the header's "HS256"; it is never
// registered globally.
type hs256 struct{}

func (hs256) Alg() string { return "HS256" }

func (hs256) Verify(signingString string, sig []byte, key any) error {
	k, ok := key.(*ringKey)
	if !ok {
		return jwt.ErrInvalidKeyType
	}
	st := k.get()
	st.buf = append(st.buf[:0], signingString...)
	ok = hmac.Equal(sig, st.mac(st.buf))
	k.put(st)
	if !ok {
		return jwt.ErrSignatureInvalid
	}
	return nil
}

func (hs256) Sign(signingString string, key any) ([]byte, error) {
	k, ok := key.(*ringKey)
	if !ok {
		return nil, jwt.ErrInvalidKeyType
	}
	st := k.get()
	st.buf = append(st.buf[:0], signingString...)
	sig := append([]byte(nil), st.mac(st.buf)...)
	k.put(st)
	return sig, nil
}

// sign returns the token for c, signed by k: the cached header segment, the
// claims encoded by hand, and a MAC from a pooled HMAC state. It makes the
// same bytes jwt.NewWithClaims(...).SignedString would for these claims,
// without the reflection.
func (k *ringKey) sign(policy, subject string, id pow.ID, nbf, exp, n int64) string {
	st := k.get()
	p := append(st.payload[:0], `{"aud":"`...)
	p = append(p, policy...)
	p = append(p, `","sub":"`...)
	p = append(p, subject...)
	p = append(p, `","jti":"`...)
	p = base64.RawURLEncoding.AppendEncode(p, id[:])
	p = append(p, `","nbf":`...)
	p = strconv.AppendInt(p, nbf, 10)
	p = append(p, `,"exp":`...)
	p = strconv.AppendInt(p, exp, 10)
	p = append(p, `,"n":`...)
	p = strconv.AppendInt(p, n, 10)
	p = append(p, '}')
	st.payload = p

	b := append(st.buf[:0], k.header...)
	b = base64.RawURLEncoding.AppendEncode(b, p)
	sum := st.mac(b)
	b = append(b, '.')
	b = base64.RawURLEncoding.AppendEncode(b, sum)
	st.buf = b
	tok := string(b)
	k.put(st)
	return tok
}

// tokenClaims decodes and validates a token's claims for jwt.Parser. It is
// set up with the policy and subject it must carry, so a token for another
// policy or client is refused while decoding, before its MAC is computed.
// UnmarshalJSON reads only what sign writes: the six claims once each, in
// any order, strings without escapes, non-negative integers; anything else
// is malformed. Its Claims methods return pointers into itself, so
// validation allocates nothing.
type tokenClaims struct {
	wantAud, wantSub string

	aud      [1]string
	id       pow.ID
	nbf, exp jwt.NumericDate
	n        int64
}

// strictB64 decodes the jti (Strict allocates, so once).
var strictB64 = base64.RawURLEncoding.Strict()

var (
	errClaims  = errors.New("claims are not as issued")
	errPolicy  = ErrPolicy
	errSubject = ErrSubject
)

func (c *tokenClaims) GetExpirationTime() (*jwt.NumericDate, error) { return &c.exp, nil }
func (c *tokenClaims) GetNotBefore() (*jwt.NumericDate, error)      { return &c.nbf, nil }
func (c *tokenClaims) GetIssuedAt() (*jwt.NumericDate, error)       { return nil, nil }
func (c *tokenClaims) GetIssuer() (string, error)                   { return "", nil }
func (c *tokenClaims) GetSubject() (string, error)                  { return c.wantSub, nil }
func (c *tokenClaims) GetAudience() (jwt.ClaimStrings, error)       { return c.aud[:], nil }

const (
	seenAud = 1 << iota
	seenSub
	seenJTI
	seenNBF
	seenEXP
	seenN
	seenAll = seenAud | seenSub | seenJTI | seenNBF | seenEXP | seenN
)

// maxNumericDate keeps times far inside what time.Time and JSON handle.
const maxNumericDate = 1 << 40

// UnmarshalJSON implements json.Unmarshaler. encoding/json has already
// checked that data is valid JSON.
func (c *tokenClaims) UnmarshalJSON(data []byte) error {
	d := claimDecoder{data: data}
	seen := 0
	if !d.byte('{') {
		return errClaims
	}
	for first := true; ; first = false {
		if d.byte('}') {
			if first || seen != seenAll {
				return errClaims
			}
			return d.end()
		}
		if !first && !d.byte(',') {
			return errClaims
		}
		key, ok := d.str()
		if !ok || !d.byte(':') {
			return errClaims
		}
		var bit int
		switch string(key) {
		case "aud":
			bit = seenAud
			v, ok := d.str()
			if !ok {
				return errClaims
			}
			if string(v) != c.wantAud {
				return errPolicy
			}
			c.aud[0] = c.wantAud
		case "sub":
			bit = seenSub
			v, ok := d.str()
			if !ok {
				return errClaims
			}
			if subtle.ConstantTimeCompare(v, []byte(c.wantSub)) != 1 {
				return errSubject
			}
		case "jti":
			bit = seenJTI
			v, ok := d.str()
			if !ok || strictB64.EncodedLen(len(c.id)) != len(v) {
				return errClaims
			}
			if n, err := strictB64.Decode(c.id[:], v); err != nil || n != len(c.id) {
				return errClaims
			}
		case "nbf", "exp", "n":
			v, ok := d.int()
			if !ok {
				return errClaims
			}
			switch key[0] {
			case 'n':
				if len(key) == 1 {
					bit, c.n = seenN, v
				} else {
					bit, c.nbf = seenNBF, jwt.NumericDate{Time: time.Unix(v, 0)}
				}
			case 'e':
				bit, c.exp = seenEXP, jwt.NumericDate{Time: time.Unix(v, 0)}
			}
		default:
			return errClaims
		}
		if seen&bit != 0 {
			return errClaims
		}
		seen |= bit
	}
}

// claimDecoder reads the restricted JSON of tokenClaims.
type claimDecoder struct {
	data []byte
	i    int
}

func (d *claimDecoder) ws() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *claimDecoder) byte(b byte) bool {
	d.ws()
	if d.i < len(d.data) && d.data[d.i] == b {
		d.i++
		return true
	}
	return false
}

func (d *claimDecoder) end() error {
	d.ws()
	if d.i != len(d.data) {
		return errClaims
	}
	return nil
}

// str reads a string of printable ASCII without escapes, at most 256 bytes.
func (d *claimDecoder) str() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			v := d.data[start:d.i]
			d.i++
			return v, len(v) <= 256
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// int reads a non-negative integer without sign, fraction or exponent, at
// most maxNumericDate.
func (d *claimDecoder) int() (int64, bool) {
	d.ws()
	start := d.i
	var v int64
	for d.i < len(d.data) && d.data[d.i] >= '0' && d.data[d.i] <= '9' {
		v = v*10 + int64(d.data[d.i]-'0')
		d.i++
		if v > maxNumericDate {
			return 0, false
		}
	}
	n := d.i - start
	if n == 0 || n > 1 && d.data[start] == '0' {
		return 0, false
	}
	if d.i < len(d.data) {
		switch d.data[d.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return v, true
}
