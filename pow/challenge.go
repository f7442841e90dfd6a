package pow

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/bits"
	"sync"
	"time"

	isecret "github.com/edgelimit/edgelimit/internal/secret"
)

// Format constants of version 1.
const (
	// Version is the challenge format this package issues and accepts.
	Version = 1
	// DefaultBits is the difficulty when Config.Bits is zero.
	DefaultBits = 16
	// MaxBits is the hardest difficulty a challenge may ask for.
	MaxBits = 32
	// DefaultTTL is how long a challenge can be answered when Config.TTL is zero.
	DefaultTTL = 10 * time.Second
	// MaxTTL bounds Config.TTL.
	MaxTTL = 10 * time.Minute
	// SaltSize is the size of a challenge's random salt, which also names
	// the challenge in the replay cache.
	SaltSize = 12
	// ChallengeLength is the length of a challenge string.
	ChallengeLength = 48
	// ProofLength is the length of a proof string: challenge "." nonce.
	ProofLength = ChallengeLength + 1 + nonceLength

	headerSize  = 2 + 6 + SaltSize     // version, bits, expiry, salt
	tagSize     = 16                   // truncated HMAC-SHA256
	rawSize     = headerSize + tagSize // 36 bytes, 48 base64url characters
	nonceSize   = 8
	nonceLength = 11                  // base64url of 8 bytes
	workSize    = rawSize + nonceSize // the hashed message: one SHA-256 block
	maxExpiryMS = 1<<48 - 1
)

// challengeLabel separates the challenge MAC key from every other key derived
// from the same secret (the signed-window token key uses another label).
const challengeLabel = "edgelimit/pow/challenge/v1"

// Config configures a Challenger.
type Config struct {
	// Secrets key the challenge MAC: the first signs, all verify (for key
	// rotation). Each must be at least isecret.MinLength (32) bytes.
	// The MAC key is derived from each secret with a label of its own, so
	// the same secrets can also sign window tokens. Required.
	Secrets [][]byte
	// Bits is the number of leading zero bits a proof needs, 1 to MaxBits.
	// Default DefaultBits (16).
	Bits int
	// TTL is how long a challenge can be answered. Default DefaultTTL (10s),
	// at most MaxTTL.
	TTL time.Duration
	// Now is the clock of Issue, Verify and Redeem; default time.Now. The
	// ...At methods take the instant instead.
	Now func() time.Time
	// Rand supplies the challenges' salts; default crypto/rand. It must be
	// safe for concurrent use. A reader that fails is replaced by
	// crypto/rand for that read.
	Rand io.Reader
	// Replay remembers redeemed proofs. Default: a new cache of
	// DefaultReplayEntries entries, private to this Challenger.
	Replay *ReplayCache
}

// Challenger issues and verifies proof-of-work challenges. It keeps no state
// per challenge: a challenge is a signed statement the client hands back with
// its proof. It is safe for concurrent use.
type Challenger struct {
	keys   []*macKey // keys[0] signs
	bits   int
	ttl    time.Duration
	now    func() time.Time
	rand   io.Reader
	replay *ReplayCache
}

// macKey is one derived challenge key with a pool of keyed HMAC states, so
// that a MAC costs the compression of the message only, never the key
// schedule again.
type macKey struct {
	pool sync.Pool
}

type macState struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

func newMACKey(secret []byte, label string) *macKey {
	d := hmac.New(sha256.New, secret)
	d.Write([]byte(label))
	derived := d.Sum(nil)
	k := &macKey{}
	k.pool.New = func() any {
		return &macState{h: hmac.New(sha256.New, derived), buf: make([]byte, 0, 128)}
	}
	return k
}

// tag writes the challenge tag of header, bound to key and policy, to out.
func (k *macKey) tag(out, header []byte, key, policy string) {
	st := k.pool.Get().(*macState)
	st.buf = append(st.buf[:0], header...)
	st.buf = binary.BigEndian.AppendUint16(st.buf, uint16(len(policy)))
	st.buf = append(st.buf, policy...)
	st.buf = append(st.buf, key...)
	st.h.Reset()
	st.h.Write(st.buf)
	st.h.Sum(st.sum[:0])
	copy(out, st.sum[:tagSize])
	if cap(st.buf) <= 4096 {
		k.pool.Put(st)
	}
}

// New validates cfg and returns a Challenger.
func New(cfg Config) (*Challenger, error) {
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("pow: Config.Secrets is required")
	}
	c := &Challenger{bits: cfg.Bits, ttl: cfg.TTL, now: cfg.Now, rand: cfg.Rand, replay: cfg.Replay}
	for i, s := range cfg.Secrets {
		if len(s) < isecret.MinLength {
			return nil, fmt.Errorf("pow: secret %d: %w", i, isecret.ErrShort)
		}
		c.keys = append(c.keys, newMACKey(s, challengeLabel))
	}
	if c.bits == 0 {
		c.bits = DefaultBits
	}
	if c.bits < 1 || c.bits > MaxBits {
		return nil, fmt.Errorf("pow: Config.Bits %d must be between 1 and %d", cfg.Bits, MaxBits)
	}
	if c.ttl == 0 {
		c.ttl = DefaultTTL
	}
	if c.ttl < time.Millisecond || c.ttl > MaxTTL {
		return nil, fmt.Errorf("pow: Config.TTL %s must be between 1ms and %s", cfg.TTL, MaxTTL)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.rand == nil {
		c.rand = rand.Reader
	}
	if c.replay == nil {
		c.replay = NewReplayCache(0)
	}
	return c, nil
}

// Bits returns the difficulty of the challenges c issues.
func (c *Challenger) Bits() int { return c.bits }

// TTL returns how long c's challenges can be answered.
func (c *Challenger) TTL() time.Duration { return c.ttl }

// ReplayCache returns the cache in which Redeem spends proofs.
func (c *Challenger) ReplayCache() *ReplayCache { return c.replay }

// Challenge is a proof-of-work challenge as a client receives it: the
// Edgelimit-Challenge header carries Value, the problem body all three.
type Challenge struct {
	// Value is the opaque, signed challenge string the client must solve.
	Value string `json:"challenge"`
	// Bits is the number of leading zero bits the proof's hash needs.
	Bits int `json:"bits"`
	// Expires is when the challenge stops being accepted.
	Expires time.Time `json:"expires"`
}

// Issue returns a new challenge for the client key (already hashed) on
// policy, expiring TTL from now.
func (c *Challenger) Issue(key, policy string) Challenge {
	return c.IssueAt(c.now(), key, policy)
}

// IssueAt is Issue at the instant now.
func (c *Challenger) IssueAt(now time.Time, key, policy string) Challenge {
	var raw [rawSize]byte
	raw[0] = Version
	raw[1] = byte(c.bits)
	ms := min(max(now.Add(c.ttl).UnixMilli(), 0), maxExpiryMS)
	putUint48(raw[2:8], uint64(ms))
	if _, err := io.ReadFull(c.rand, raw[8:headerSize]); err != nil {
		rand.Read(raw[8:headerSize]) // crypto/rand never fails
	}
	c.keys[0].tag(raw[headerSize:], raw[:headerSize], key, policy)
	return Challenge{Value: b64.EncodeToString(raw[:]), Bits: c.bits, Expires: time.UnixMilli(ms).UTC()}
}

// Proof is a verified proof of work.
type Proof struct {
	// Salt names the challenge; it is the proof's key in a ReplayCache.
	Salt [SaltSize]byte
	// Bits is the difficulty the challenge asked for.
	Bits int
	// Expires is when the challenge stops being accepted.
	Expires time.Time
	// Nonce is the client's solution.
	Nonce uint64
}

// ID returns the proof's key in a ReplayCache: its challenge's salt.
func (p Proof) ID() ID { return ID(p.Salt) }

// Verify checks a proof ("challenge.nonce") for the client key and policy at
// the current time, without spending it. See VerifyAt.
func (c *Challenger) Verify(proof, key, policy string) (Proof, error) {
	return c.VerifyAt(c.now(), proof, key, policy)
}

// VerifyAt checks a proof for the client key and policy at the instant now:
// the challenge is well formed, unexpired, at least as hard as c requires,
// SHA-256(challenge ‖ nonce) has the leading zero bits it asks for, and its
// MAC (checked last, in constant time, newest key first) binds it to one of
// c's keys, this client key and this policy. It costs one SHA-256 and, for a
// proof that did the work, one HMAC per key tried. It does not spend the
// proof; see RedeemAt.
func (c *Challenger) VerifyAt(now time.Time, proof, key, policy string) (Proof, error) {
	var msg [workSize]byte
	if len(proof) != ProofLength || proof[ChallengeLength] != '.' ||
		!decodeB64(msg[:rawSize], proof[:ChallengeLength]) ||
		!decodeB64(msg[rawSize:], proof[ChallengeLength+1:]) {
		return Proof{}, ErrMalformed
	}
	raw := msg[:rawSize]
	if raw[0] != Version {
		return Proof{}, ErrVersion
	}
	p := Proof{Bits: int(raw[1]), Nonce: binary.BigEndian.Uint64(msg[rawSize:])}
	if p.Bits > MaxBits {
		return Proof{}, ErrMalformed
	}
	if p.Bits < c.bits {
		return Proof{}, ErrWeakChallenge
	}
	ms := int64(uint48(raw[2:8]))
	if now.UnixMilli() >= ms {
		return Proof{}, ErrExpired
	}
	sum := sha256.Sum256(msg[:])
	if LeadingZeroBits(sum[:]) < p.Bits {
		return Proof{}, ErrTooFewBits
	}
	var want [tagSize]byte
	ok := false
	for _, k := range c.keys {
		k.tag(want[:], raw[:headerSize], key, policy)
		if hmac.Equal(want[:], raw[headerSize:]) {
			ok = true
			break
		}
	}
	if !ok {
		return Proof{}, ErrSignature
	}
	copy(p.Salt[:], raw[8:headerSize])
	p.Expires = time.UnixMilli(ms).UTC()
	return p, nil
}

// Redeem verifies a proof and spends it in c's replay cache; see RedeemAt.
func (c *Challenger) Redeem(proof, key, policy string) (Proof, error) {
	return c.RedeemAt(c.now(), proof, key, policy)
}

// RedeemAt verifies a proof at the instant now and spends it: a proof is
// accepted once per replay cache (once per instance), and remembered only
// until its challenge expires. A replayed proof returns ErrReplayed.
func (c *Challenger) RedeemAt(now time.Time, proof, key, policy string) (Proof, error) {
	p, err := c.VerifyAt(now, proof, key, policy)
	if err != nil {
		return Proof{}, err
	}
	if !c.replay.Spend(p.ID(), 0, 1, p.Expires, now) {
		return Proof{}, ErrReplayed
	}
	return p, nil
}

// Statement is what a client can read from a challenge without the key.
type Statement struct {
	Version int
	// Bits is the number of leading zero bits the proof's hash needs.
	Bits int
	// Expires is when the server stops accepting the challenge.
	Expires time.Time
	// Salt is the challenge's random salt.
	Salt [SaltSize]byte
}

// ParseChallenge decodes a challenge string. It cannot check the MAC (only
// the server can); it is what a client needs to decide whether to solve.
func ParseChallenge(s string) (Statement, error) {
	var raw [rawSize]byte
	if len(s) != ChallengeLength || !decodeB64(raw[:], s) {
		return Statement{}, ErrMalformed
	}
	if raw[0] != Version {
		return Statement{}, ErrVersion
	}
	st := Statement{Version: int(raw[0]), Bits: int(raw[1]), Expires: time.UnixMilli(int64(uint48(raw[2:8]))).UTC()}
	if st.Bits < 1 || st.Bits > MaxBits {
		return Statement{}, ErrMalformed
	}
	copy(st.Salt[:], raw[8:headerSize])
	return st, nil
}

// LeadingZeroBits returns the number of leading zero bits of b.
func LeadingZeroBits(b []byte) int {
	n := 0
	for _, x := range b {
		if x != 0 {
			return n + bits.LeadingZeros8(x)
		}
		n += 8
	}
	return n
}

// ExpectedTries is the mean number of hashes a solver computes for a
// challenge of the given difficulty: 2^bits.
func ExpectedTries(bits int) float64 {
	return float64(uint64(1) << uint(min(max(bits, 0), 63)))
}

func putUint48(b []byte, v uint64) {
	_ = b[5]
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

func uint48(b []byte) uint64 {
	_ = b[5]
	return uint64(b[0])<<40 | uint64(b[1])<<32 | uint64(b[2])<<24 | uint64(b[3])<<16 | uint64(b[4])<<8 | uint64(b[5])
}
