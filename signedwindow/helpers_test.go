package signedwindow

import (
	"context"
	"encoding/json"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
)

var (
	t0      = time.Unix(1_700_000_000, 0)
	secret1 = []byte("signedwindow-test-secret-1-0123456789")
	secret2 = []byte("signedwindow-test-secret-2-0123456789")
)

const (
	keyA = "x4mrL0ZvN1cQ9bAqP7sT2w" // hashed client keys, as the engine makes them
	keyB = "Yb8sQ1qN3cR0aPo7mL2kJw"
)

// clock is a settable clock for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func mustKey(t testing.TB, id string, secret []byte) Key {
	t.Helper()
	k, err := NewKeyFromSecret(id, secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ring(t testing.TB, keys ...Key) *KeyRing {
	t.Helper()
	if len(keys) == 0 {
		keys = []Key{mustKey(t, "k1", secret1)}
	}
	r, err := NewKeyRing(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// policy returns a signed policy; bits 0 means no proof of work.
func signedPolicy(name string, limit int64, window time.Duration, bits int) *policy.Policy {
	o := &Options{}
	if bits > 0 {
		o.ProofOfWork = &ProofOfWork{Bits: bits, TTL: 10 * time.Second}
	}
	return &policy.Policy{Name: name, Strategy: Strategy, Limit: limit, Window: window, Cost: 1, Options: o}
}

type fixture struct {
	l     *Limiter
	clock *clock
	keys  *KeyRing
}

func newFixture(t testing.TB, p *policy.Policy, keys *KeyRing) *fixture {
	t.Helper()
	if keys == nil {
		keys = ring(t)
	}
	c := newClock(t0)
	l, err := New(Config{Policy: p, Keys: keys, Now: c.Now, Rand: seeded(7)})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{l: l, clock: c, keys: keys}
}

func (f *fixture) allow(t testing.TB, key, token, proof string) edgelimit.Decision {
	t.Helper()
	d, err := f.l.Allow(context.Background(), withState(edgelimit.Request{Key: key, Cost: 1}, token, proof))
	if err != nil {
		t.Fatalf("Allow returned an error: %v", err)
	}
	return d
}

// headerMap is a request's headers for tests, looked up case-insensitively.
type headerMap map[string]string

func (h headerMap) Get(name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// withState returns r carrying token and proof in its Edgelimit-Token and
// Edgelimit-Proof headers, as a client sends them.
func withState(r edgelimit.Request, token, proof string) edgelimit.Request {
	h := headerMap{}
	if token != "" {
		h[HeaderToken] = token
	}
	if proof != "" {
		h[HeaderProof] = proof
	}
	r.Header = h
	return r
}

// tokenIn and proofOf return the client state r carries.
func tokenIn(r edgelimit.Request) string {
	if r.Header == nil {
		return ""
	}
	return r.Header.Get(HeaderToken)
}

func proofOf(r edgelimit.Request) string {
	if r.Header == nil {
		return ""
	}
	return r.Header.Get(HeaderProof)
}

// tokenOf returns the window token a decision hands back, or "".
func tokenOf(d edgelimit.Decision) string { return field(d, HeaderToken) }

func field(d edgelimit.Decision, name string) string {
	if d.Response != nil && d.Response.Field.Name == name {
		return d.Response.Field.Value
	}
	return ""
}

// challengeOf returns the challenge a decision hands back, or nil; it
// checks that the header and the problem body's member agree.
func challengeOf(d edgelimit.Decision) *pow.Challenge {
	v := field(d, HeaderChallenge)
	if v == "" {
		return nil
	}
	var ext struct {
		Challenge *pow.Challenge `json:"challenge"`
	}
	if err := json.Unmarshal([]byte(d.Response.Extension), &ext); err != nil || ext.Challenge == nil || ext.Challenge.Value != v {
		panic("challenge header and problem member disagree: " + d.Response.Extension)
	}
	return ext.Challenge
}

// solve answers a challenge with pow.Solve.
func solve(t testing.TB, ch *pow.Challenge) string {
	t.Helper()
	if ch == nil {
		t.Fatal("no challenge to solve")
	}
	p, err := pow.Solve(context.Background(), ch.Value)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lockedReader makes a deterministic reader safe for concurrent use, as
// Config.Rand must be.
type lockedReader struct {
	mu sync.Mutex
	r  *mrand.ChaCha8
}

func seeded(seed byte) *lockedReader { return &lockedReader{r: mrand.NewChaCha8([32]byte{seed})} }

func (l *lockedReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Read(p)
}
