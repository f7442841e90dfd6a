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

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgelimit/edgelimit/internal/keyring"
	isecret "github.com/edgelimit/edgelimit/internal/secret"
)

// EnvSecrets is the environment variable that holds the key ring:
// "kid:base64,kid:base64", newest (signing) key first.
const EnvSecrets = "EDGELIMIT_SECRETS"

// MaxKeyIDLength bounds a key id.
const MaxKeyIDLength = keyring.MaxIDLength

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
// isecret.MinLength (32) bytes, best 32 random bytes. The id is a
// short public name (every token's header carries it): one that could be a
// secret, base64 of 32 bytes or more, is refused, as ParseKeyRing refuses
// it. Errors never repeat the id.
func NewKeyFromSecret(id string, secret []byte) (Key, error) {
	if !validKeyID(id) {
		return Key{}, fmt.Errorf("%w: key id must be 1-%d characters of A-Z a-z 0-9 . _ -", ErrBadKey, MaxKeyIDLength)
	}
	if keyring.LooksLikeSecret(id) {
		return Key{}, fmt.Errorf("%w: the key id looks like a secret (43 or more base64 characters); a key id is a short public name", ErrBadKey)
	}
	if len(secret) < isecret.MinLength {
		return Key{}, fmt.Errorf("signedwindow: a secret of %d bytes: %w", len(secret), isecret.ErrShort)
	}
	return Key{id: id, secret: append([]byte(nil), secret...)}, nil
}

// GenerateKey returns a new key: 32 random bytes under a random id like
// "k1f0c3a9b".
func GenerateKey() Key {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails
	return Key{id: "k" + hex.EncodeToString(b[:]), secret: isecret.Random()}
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

func validKeyID(id string) bool { return keyring.ValidID(id) }

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
		if !validKeyID(k.id) || len(k.secret) < isecret.MinLength {
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
	entries, err := keyring.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	keys := make([]Key, len(entries))
	for i, e := range entries {
		keys[i] = Key{id: e.ID, secret: e.Secret}
	}
	return NewKeyRing(keys...)
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
