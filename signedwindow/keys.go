package signedwindow

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"strings"
	"sync"
	"unicode"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgelimit/edgelimit"
)

// EnvSecrets is the environment variable that holds the key ring:
// "kid:base64,kid:base64", newest (signing) key first.
const EnvSecrets = "EDGELIMIT_SECRETS"

// MaxKeyIDLength bounds a key id.
const MaxKeyIDLength = 64

// tokenLabel separates the token MAC key from every other key derived from
// the same secret (proof-of-work challenges use another label, so a token
// can never pass as a challenge or the reverse).
const tokenLabel = "edgelimit/signedwindow/token/v1"

// Key is one secret of a KeyRing, named by its key id (the JWT "kid").
// Its String, GoString, Format and LogValue never show the secret; only
// Entry does, for printing a new key once.
type Key struct {
	id     string
	secret []byte
}

// NewKeyFromSecret returns the key id with secret, which must be at least
// edgelimit.MinSecretLength (32) bytes, best 32 random bytes. The id is a
// short public name (every token's header carries it): one that could be a
// secret, base64 of 32 bytes or more, is refused, as ParseKeyRing refuses
// it. Errors never repeat the id.
func NewKeyFromSecret(id string, secret []byte) (Key, error) {
	if !validKeyID(id) {
		return Key{}, fmt.Errorf("%w: key id must be 1-%d characters of A-Z a-z 0-9 . _ -", ErrBadKey, MaxKeyIDLength)
	}
	if looksLikeSecret(id) {
		return Key{}, fmt.Errorf("%w: the key id looks like a secret (43 or more base64 characters); a key id is a short public name", ErrBadKey)
	}
	if len(secret) < edgelimit.MinSecretLength {
		return Key{}, fmt.Errorf("signedwindow: a secret of %d bytes: %w", len(secret), edgelimit.ErrShortSecret)
	}
	return Key{id: id, secret: append([]byte(nil), secret...)}, nil
}

// GenerateKey returns a new key: 32 random bytes under a random id like
// "k1f0c3a9b".
func GenerateKey() Key {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails
	return Key{id: "k" + hex.EncodeToString(b[:]), secret: edgelimit.RandomSecret()}
}

// NewKey returns a new "kid:base64" entry for EDGELIMIT_SECRETS: what
// `edgelimit keygen` prints.
func NewKey() string { return GenerateKey().Entry() }

// ID returns the key id.
func (k Key) ID() string { return k.id }

// Entry returns the key as a "kid:base64" entry of EDGELIMIT_SECRETS. It
// reveals the secret: print it once, to whoever configures the key.
func (k Key) Entry() string { return k.id + ":" + base64.StdEncoding.EncodeToString(k.secret) }

// String returns the key id, never the secret.
func (k Key) String() string { return "signedwindow.Key{" + k.id + ", secret redacted}" }

// GoString is String, so %#v does not print the secret either.
func (k Key) GoString() string { return k.String() }

// Format writes String for every verb, so no verb prints the secret.
func (k Key) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// LogValue logs the key id only.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

func validKeyID(id string) bool {
	if id == "" || len(id) > MaxKeyIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// KeyRing holds the keys that sign and verify window tokens (and key
// proof-of-work challenges): the first key signs, every key verifies, and a
// key removed from the ring (retired) stops verifying at once. Rotate in
// three deployments — add the new key last ("old,new": old signs, new
// verifies), then put it first ("new,old"), then, after the longest window
// plus the proof-of-work TTL, drop the old one ("new") — so that no instance
// ever sees a token signed by a key it does not know. A KeyRing is immutable
// and safe for concurrent use; share one between policies.
type KeyRing struct {
	keys []*ringKey
	byID map[string]*ringKey
}

// ringKey is a key with its derived token key, its precomputed JWT header,
// and a pool of keyed HMAC states (so a token MAC never re-derives the HMAC
// key schedule).
type ringKey struct {
	Key
	header string // base64url({"alg":"HS256","kid":"<id>"}) + "."
	pool   sync.Pool
}

// macState is a keyed HMAC-SHA256 with scratch space.
type macState struct {
	h       hash.Hash
	buf     []byte
	payload []byte
	sum     [sha256.Size]byte
}

func newRingKey(k Key) *ringKey {
	d := hmac.New(sha256.New, k.secret)
	d.Write([]byte(tokenLabel))
	derived := d.Sum(nil)
	rk := &ringKey{Key: k}
	rk.header = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","kid":"`+k.id+`"}`)) + "."
	rk.pool.New = func() any {
		return &macState{h: hmac.New(sha256.New, derived), buf: make([]byte, 0, 512), payload: make([]byte, 0, 256)}
	}
	return rk
}

func (k *ringKey) get() *macState { return k.pool.Get().(*macState) }

func (k *ringKey) put(st *macState) {
	if cap(st.buf) <= 8192 {
		k.pool.Put(st)
	}
}

// mac computes the token MAC of msg into st.sum.
func (st *macState) mac(msg []byte) []byte {
	st.h.Reset()
	st.h.Write(msg)
	return st.h.Sum(st.sum[:0])
}

// NewKeyRing returns a ring of keys; keys[0] signs. Key ids must be unique.
func NewKeyRing(keys ...Key) (*KeyRing, error) {
	if len(keys) == 0 {
		return nil, ErrNoKeys
	}
	r := &KeyRing{byID: make(map[string]*ringKey, len(keys))}
	for i, k := range keys {
		if !validKeyID(k.id) || len(k.secret) < edgelimit.MinSecretLength {
			return nil, fmt.Errorf("%w: use NewKeyFromSecret or GenerateKey", ErrBadKey)
		}
		if r.byID[k.id] != nil {
			return nil, fmt.Errorf("%w: key %d has the id of an earlier key", ErrBadKey, i+1)
		}
		rk := newRingKey(k)
		r.keys = append(r.keys, rk)
		r.byID[k.id] = rk
	}
	return r, nil
}

// ParseKeyRing parses EDGELIMIT_SECRETS: comma-separated "kid:base64"
// entries, the newest first (it signs; the others only verify). Base64 may
// be standard or URL-safe, padded or not; each secret must decode to at
// least 32 bytes. Spaces and newlines around entries are ignored, and so
// are empty entries (a trailing comma).
//
// A key id is a short public name (it travels in the header of every
// token), so ParseKeyRing refuses one that could be a secret: 43 or more
// base64 characters that decode to 32 bytes or more, as when the halves of
// an entry are swapped or a secret is pasted twice. It refuses two entries
// with the same id or the same secret too.
//
// Errors name an entry by its position and say what is wrong with its
// shape, never any part of its text: a slip can put a secret anywhere,
// including where the key id belongs.
func ParseKeyRing(s string) (*KeyRing, error) {
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
		return nil, fmt.Errorf("%w: %s holds JSON (the whole Secrets Manager secret?); set it to the token_secrets value alone, "+
			"as template.yaml's dynamic reference does: %s", ErrBadKey, EnvSecrets, expectedEntry)
	}
	var keys []Key
	var pos []int
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		k, err := parseEntry(entry)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d of %s: %w", ErrBadKey, i+1, EnvSecrets, err)
		}
		for j, prev := range keys {
			switch {
			case prev.id == k.id:
				return nil, fmt.Errorf("%w: entries %d and %d of %s have the same key id; each key needs its own", ErrBadKey, pos[j], i+1, EnvSecrets)
			case hmac.Equal(prev.secret, k.secret):
				return nil, fmt.Errorf("%w: entries %d and %d of %s have the same secret; each key needs its own (edgelimit keygen makes one)", ErrBadKey, pos[j], i+1, EnvSecrets)
			}
		}
		keys = append(keys, k)
		pos = append(pos, i+1)
	}
	return NewKeyRing(keys...)
}

// expectedEntry ends every entry error: the shape wanted, with an example
// that is obviously not a key.
const expectedEntry = "expected kid:base64, like k1:<44 base64 characters> (`edgelimit keygen` prints one)"

// entryError is what is wrong with one entry: its shape, never its text.
type entryError struct {
	problem string
	short   bool // the secret is too short: wraps edgelimit.ErrShortSecret
}

func (e *entryError) Error() string { return e.problem + "; " + expectedEntry }

func (e *entryError) Unwrap() error {
	if e.short {
		return edgelimit.ErrShortSecret
	}
	return nil
}

// parseEntry parses one trimmed, non-empty "kid:base64" entry. Its errors
// describe the entry's shape only.
func parseEntry(entry string) (Key, error) {
	bad := func(problem string) (Key, error) { return Key{}, &entryError{problem: problem} }
	if q := entry[0]; q == '"' || q == '\'' || q == '`' || strings.ContainsAny(entry[len(entry)-1:], "\"'`") {
		return bad("it is in quotes; remove them")
	}
	switch n := strings.Count(entry, ":"); {
	case n == 0:
		if looksLikeSecret(entry) {
			return bad("it has no colon: it looks like a secret without its key id")
		}
		return bad("it has no colon")
	case n > 1:
		return bad(fmt.Sprintf("it has %d colons where one belongs, between the key id and the secret (are two entries "+
			"run together? entries are separated by commas)", n))
	}
	id, b64, _ := strings.Cut(entry, ":")
	id, b64 = strings.TrimSpace(id), strings.TrimSpace(b64)
	switch {
	case id == "" && b64 == "":
		return bad("it is a colon alone")
	case id == "":
		return bad("nothing stands before the colon: the key id is missing")
	case b64 == "" && looksLikeSecret(id):
		return bad("nothing stands after the colon, and the part before it looks like a secret: the key id is missing")
	case b64 == "":
		return bad("nothing stands after the colon: the secret is missing")
	case looksLikeSecret(id):
		// Also a valid kid of URL-safe characters: refused all the same,
		// since the kid is sent to every client in its tokens.
		return bad("the part before the colon looks like a secret (43 or more base64 characters): are the halves swapped, " +
			"or the secret pasted twice? The key id comes first, and is a short name")
	case strings.ContainsFunc(id, unicode.IsSpace):
		return bad("the key id contains white space")
	case len(id) > MaxKeyIDLength:
		return bad(fmt.Sprintf("the key id is %d characters long; at most %d", len(id), MaxKeyIDLength))
	case !validKeyID(id):
		return bad("the key id has a character other than A-Z a-z 0-9 . _ -" + swapHint(id, b64))
	}
	secret, ok := decodeSecret(b64)
	if !ok {
		return bad("the part after the colon is not base64: " + base64Problem(b64) + swapHint(id, b64))
	}
	defer clear(secret)
	if len(secret) < edgelimit.MinSecretLength {
		return Key{}, &entryError{short: true, problem: fmt.Sprintf("the secret decodes to %s; it needs at least %d%s",
			plural(len(secret), "byte"), edgelimit.MinSecretLength, swapHint(id, b64))}
	}
	return Key{id: id, secret: append([]byte(nil), secret...)}, nil
}

// swapHint suggests that the halves are swapped when the part before the
// colon is longer than the part after it and looks like base64 of some
// length (a short secret, too short for looksLikeSecret).
func swapHint(id, b64 string) string {
	if len(id) <= len(b64) || len(id) < 16 {
		return ""
	}
	if _, ok := decodeSecret(id); !ok {
		return ""
	}
	return " (the part before the colon looks like base64: are the halves swapped? The key id comes first)"
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// looksLikeSecret reports whether s decodes as base64 to a secret's length.
func looksLikeSecret(s string) bool {
	b, ok := decodeSecret(s)
	clear(b)
	return ok && len(b) >= edgelimit.MinSecretLength
}

// base64Problem says why s, which no base64 encoding decodes, is not
// base64, without quoting it.
func base64Problem(s string) string {
	switch {
	case strings.ContainsFunc(s, unicode.IsSpace):
		return "it contains white space"
	case strings.ContainsFunc(s, func(r rune) bool { return !isBase64Char(r) }):
		return "it has a character other than A-Z a-z 0-9 + / - _ ="
	case strings.ContainsAny(s, "+/") && strings.ContainsAny(s, "-_"):
		return "it mixes standard (+ /) and URL-safe (- _) characters"
	}
	return "its length or padding is wrong (cut short?)"
}

func isBase64Char(r rune) bool {
	return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("+/-_=", r)
}

// decodeSecret decodes standard or URL-safe base64, padded or not (line
// breaks inside are skipped, as Go's decoder does).
func decodeSecret(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && s != "" {
			return b, true
		}
	}
	return nil, false
}

// EphemeralKeyRing returns a ring of one new random key, for local
// development: tokens and challenges die with the process and are not
// shared between instances. Warn when using it.
func EphemeralKeyRing() *KeyRing {
	r, _ := NewKeyRing(GenerateKey()) // cannot fail
	return r
}

// IDs returns the key ids, the signing key first.
func (r *KeyRing) IDs() []string {
	ids := make([]string, len(r.keys))
	for i, k := range r.keys {
		ids[i] = k.id
	}
	return ids
}

// SigningKeyID returns the id of the key that signs.
func (r *KeyRing) SigningKeyID() string { return r.keys[0].id }

// String lists the key ids, never the secrets.
func (r *KeyRing) String() string {
	if r == nil {
		return "signedwindow.KeyRing{}"
	}
	var b strings.Builder
	b.WriteString("signedwindow.KeyRing{")
	for i, k := range r.keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k.id)
		if i == 0 {
			b.WriteString(" (signs)")
		}
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String.
func (r *KeyRing) GoString() string { return r.String() }

// Format writes String for every verb.
func (r *KeyRing) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, r.String()) }

// LogValue logs the key ids only.
func (r *KeyRing) LogValue() slog.Value { return slog.StringValue(r.String()) }

// secrets returns the raw secrets, signing key first, for the challenge keys.
func (r *KeyRing) secrets() [][]byte {
	s := make([][]byte, len(r.keys))
	for i, k := range r.keys {
		s[i] = k.secret
	}
	return s
}

// keyFunc is the jwt.Keyfunc: it looks the kid up and installs hs256, the
// signing method that reuses the key's HMAC states. The parser has already
// refused every alg but HS256 (jwt.WithValidMethods).
func (r *KeyRing) keyFunc(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	k := r.byID[kid]
	if k == nil {
		return nil, ErrUnknownKey
	}
	t.Method = hs256{}
	return k, nil
}
