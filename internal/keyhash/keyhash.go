// Package keyhash turns client keys into the keyed hashes stored in place
// of raw keys (IP addresses and API keys are personal data and secrets).
// The engine hashes every request's key with one of its two hashes:
//
//   - Hasher, HMAC-SHA256 keyed by the configured secret, for every key
//     that reaches a store other instances share (DynamoDB) or that an
//     operator command computes again (edgelimit usage, reset, grant): the
//     same secret must be configured on every instance that shares a store.
//   - Local, SipHash-2-4 with a 128-bit output keyed by a key derived from
//     the same secret, for keys that never leave the process (a policy on
//     an in-memory store): a pseudo-random function as well, about ten
//     times cheaper for a short key, but never to be stored where the
//     HMAC form is expected.
//
// Both write 128 bits in base64url (Length characters), so a limiter
// cannot tell them apart; which one a policy uses is the engine's choice,
// fixed when it is built, for its requests and its operator calls alike.
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

// Hasher hashes client keys with HMAC-SHA256; it is safe for concurrent
// use.
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
	var out [Length]byte
	return string(h.Append(out[:0], policy, raw))
}

// Append appends Hash(policy, raw) to dst.
func (h *Hasher) Append(dst []byte, policy string, raw []byte) []byte {
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
	return append(dst, out[:]...)
}

// Local hashes client keys that never leave the process with SipHash-2-4
// (128-bit output); it is safe for concurrent use (it holds only its key).
type Local struct{ k0, k1 uint64 }

// localLabel separates the SipHash key from every other use of the secret.
const localLabel = "edgelimit keyhash: SipHash-2-4-128 key, v1"

// NewLocal returns the in-process hash keyed from key (at least
// secret.MinLength bytes): its SipHash key is the first 128 bits of
// HMAC-SHA256(key, a fixed label), so engines sharing a secret hash alike
// and the secret itself is never a SipHash key.
func NewLocal(key []byte) (*Local, error) {
	if len(key) < secret.MinLength {
		return nil, secret.ErrShort
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(localLabel))
	k := m.Sum(nil)
	return newSip(k[:16]), nil
}

func newSip(k []byte) *Local {
	return &Local{k0: le64(k[0:8]), k1: le64(k[8:16])}
}

// maxFlat is the longest policy-and-key input Local hashes in one pass.
const maxFlat = 256

// Hash returns the in-process keyed hash of policy and raw key:
// SipHash-2-4-128(key, policy ‖ 0x00 ‖ raw), base64url without padding.
func (l *Local) Hash(policy string, raw []byte) string {
	var out [Length]byte
	return string(l.Append(out[:0], policy, raw))
}

// Append appends Hash(policy, raw) to dst.
func (l *Local) Append(dst []byte, policy string, raw []byte) []byte {
	var sum [16]byte
	if n := len(policy) + 1 + len(raw); n <= maxFlat {
		// One pass over whole words is several times faster than feeding
		// the parts in: a key is short, so copy it together on the stack.
		var flat [maxFlat]byte
		copy(flat[copy(flat[:], policy)+1:], raw)
		sum = sum128(l.k0, l.k1, flat[:n])
	} else {
		s := newSipState(l.k0, l.k1)
		s.writeString(policy)
		s.writeByte(0)
		s.write(raw)
		sum = s.sum128()
	}
	var out [Length]byte
	base64.RawURLEncoding.Encode(out[:], sum[:])
	return append(dst, out[:]...)
}
