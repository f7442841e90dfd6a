// Package keyhash turns client keys into the keyed hashes stored in place
// of raw keys (IP addresses and API keys are personal data and secrets).
// The engine hashes every request's key with it; the same secret must be
// configured on every instance that shares a store.
package keyhash

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"sync"

	"github.com/edgelimit/edgelimit/internal/secret"
)

// Length is the length of a hashed key: 128 bits in base64url.
const Length = 22

// Hasher hashes client keys; it is safe for concurrent use.
type Hasher struct {
	pool sync.Pool
}

// New returns a hasher keyed by key (at least secret.MinLength bytes).
func New(key []byte) (*Hasher, error) {
	if len(key) < secret.MinLength {
		return nil, secret.ErrShort
	}
	k := append([]byte(nil), key...)
	h := &Hasher{}
	h.pool.New = func() any { return &state{mac: hmac.New(sha256.New, k)} }
	return h, nil
}

// maxPooledBuf bounds the scratch buffer a pooled state keeps.
const maxPooledBuf = 4096

// state is one pooled HMAC with a scratch buffer, so that Hash hands the
// MAC one slice it owns and nothing of the caller's escapes to the heap.
type state struct {
	mac hash.Hash
	buf []byte
}

// Hash returns the keyed hash of policy and raw key: the first 128 bits of
// HMAC-SHA256(key, policy ‖ 0x00 ‖ raw), base64url without padding. The
// policy is mixed in so one client's items cannot be linked across
// policies.
func (h *Hasher) Hash(policy string, raw []byte) string {
	s := h.pool.Get().(*state)
	b := append(s.buf[:0], policy...)
	b = append(b, 0)
	b = append(b, raw...)
	s.mac.Reset()
	s.mac.Write(b)
	b = s.mac.Sum(b[:0]) // the input is consumed; reuse its space for the sum
	var out [Length]byte
	base64.RawURLEncoding.Encode(out[:], b[:16])
	if cap(b) <= maxPooledBuf {
		s.buf = b[:0]
	} else {
		s.buf = nil // do not keep a huge caller's key alive in the pool
	}
	h.pool.Put(s)
	return string(out[:])
}
