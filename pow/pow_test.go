package pow

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	isecret "github.com/edgelimit/edgelimit/internal/secret"
)

var (
	t0      = time.Unix(1_700_000_000, 0)
	secretA = []byte("pow-test-secret-A-0123456789abcdef")
	secretB = []byte("pow-test-secret-B-0123456789abcdef")
)

const (
	keyA   = "x4mrL0ZvN1cQ9bAqP7sT2w" // a hashed client key, as the engine makes them
	keyB   = "Yb8sQ1qN3cR0aPo7mL2kJw"
	policy = "tts"
)

// newTest returns a Challenger with a deterministic salt source.
func newTest(t testing.TB, bits int, secrets ...[]byte) *Challenger {
	t.Helper()
	if len(secrets) == 0 {
		secrets = [][]byte{secretA}
	}
	c, err := New(Config{Secrets: secrets, Bits: bits, Rand: &lockedReader{r: mrand.NewChaCha8([32]byte{1})}, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// failingNonce returns a nonce whose hash has fewer than the challenge's bits.
func failingNonce(t testing.TB, challenge string) uint64 {
	t.Helper()
	st, err := ParseChallenge(challenge)
	if err != nil {
		t.Fatal(err)
	}
	for n := uint64(0); ; n++ {
		if zeros(challenge, n) < st.Bits {
			return n
		}
	}
}

func zeros(challenge string, nonce uint64) int {
	var msg [workSize]byte
	raw, _ := base64.RawURLEncoding.DecodeString(challenge)
	copy(msg[:], raw)
	binary.BigEndian.PutUint64(msg[rawSize:], nonce)
	sum := sha256.Sum256(msg[:])
	return LeadingZeroBits(sum[:])
}

func solve(t testing.TB, challenge string) string {
	t.Helper()
	p, err := (&Solver{Workers: 1}).Solve(context.Background(), challenge)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestIssueFormat(t *testing.T) {
	c := newTest(t, 12)
	ch := c.IssueAt(t0, keyA, policy)
	if len(ch.Value) != ChallengeLength {
		t.Fatalf("len(challenge) = %d, want %d", len(ch.Value), ChallengeLength)
	}
	if ch.Bits != 12 || !ch.Expires.Equal(t0.Add(DefaultTTL)) {
		t.Errorf("IssueAt = {Bits: %d, Expires: %v}, want {12, %v}", ch.Bits, ch.Expires, t0.Add(DefaultTTL))
	}
	st, err := ParseChallenge(ch.Value)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != Version || st.Bits != 12 || !st.Expires.Equal(ch.Expires) {
		t.Errorf("ParseChallenge = %+v, want version 1, 12 bits, expiring %v", st, ch.Expires)
	}
	if strings.ContainsAny(ch.Value, "+/=.,; ") {
		t.Errorf("challenge %q is not URL-safe", ch.Value)
	}
	if other := c.IssueAt(t0, keyA, policy); other.Value == ch.Value {
		t.Error("two challenges at the same instant are equal; the salt must differ")
	}
}

func TestVerifyAccepts(t *testing.T) {
	c := newTest(t, 10)
	ch := c.IssueAt(t0, keyA, policy)
	proof := solve(t, ch.Value)
	for _, at := range []time.Time{t0, t0.Add(DefaultTTL - time.Millisecond)} {
		p, err := c.VerifyAt(at, proof, keyA, policy)
		if err != nil {
			t.Fatalf("VerifyAt(%v) = %v, want nil", at.Sub(t0), err)
		}
		if p.Bits != 10 || !p.Expires.Equal(ch.Expires) {
			t.Errorf("VerifyAt = %+v, want 10 bits expiring %v", p, ch.Expires)
		}
		if zeros(ch.Value, p.Nonce) < 10 {
			t.Errorf("nonce %d does not have 10 leading zero bits", p.Nonce)
		}
	}
	// Verify does not spend: it accepts the same proof again.
	if _, err := c.Verify(proof, keyA, policy); err != nil {
		t.Errorf("second Verify = %v, want nil", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	c := newTest(t, 8)
	ch := c.IssueAt(t0, keyA, policy)
	good := solve(t, ch.Value)
	other := c.IssueAt(t0, keyA, policy)
	weak := newTest(t, 4).IssueAt(t0, keyA, policy)
	foreign := newTest(t, 8, secretB).IssueAt(t0, keyA, policy)

	nonce := good[ChallengeLength+1:]
	raw, _ := base64.RawURLEncoding.DecodeString(ch.Value)
	tamper := func(i int, b byte) string {
		r := append([]byte(nil), raw...)
		r[i] ^= b
		return base64.RawURLEncoding.EncodeToString(r) + "." + nonce
	}
	v2 := append([]byte(nil), raw...)
	v2[0] = 2

	cases := []struct {
		name   string
		proof  string
		at     time.Time
		key    string
		policy string
		want   error
	}{
		{"too few bits", proofString(ch.Value, failingNonce(t, ch.Value)), t0, keyA, policy, ErrTooFewBits},
		{"for another challenge", other.Value + "." + nonce, t0, keyA, policy, nil},
		{"expired at expiry", good, ch.Expires, keyA, policy, ErrExpired},
		{"expired later", good, ch.Expires.Add(time.Hour), keyA, policy, ErrExpired},
		{"another client key", good, t0, keyB, policy, ErrSignature},
		{"another policy", good, t0, keyA, "tts2", ErrSignature},
		{"another secret", solve(t, foreign.Value), t0, keyA, policy, ErrSignature},
		{"weaker than required", solve(t, weak.Value), t0, keyA, policy, ErrWeakChallenge},
		{"bits lowered", tamper(1, 8^4), t0, keyA, policy, ErrWeakChallenge},
		{"bits raised", tamper(1, 8^9), t0, keyA, policy, nil},
		{"expiry extended", tamper(4, 0x40), t0, keyA, policy, nil},
		{"salt changed", tamper(10, 1), t0, keyA, policy, nil},
		{"tag changed", tamper(30, 1), t0, keyA, policy, nil},
		{"version 2", base64.RawURLEncoding.EncodeToString(v2) + "." + nonce, t0, keyA, policy, ErrVersion},
		{"empty", "", t0, keyA, policy, ErrMalformed},
		{"challenge only", ch.Value, t0, keyA, policy, ErrMalformed},
		{"no dot", ch.Value + "x" + nonce, t0, keyA, policy, ErrMalformed},
		{"short nonce", ch.Value + "." + nonce[:10], t0, keyA, policy, ErrMalformed},
		{"long", good + "A", t0, keyA, policy, ErrMalformed},
		{"not base64", strings.Replace(good, good[:1], "*", 1), t0, keyA, policy, ErrMalformed},
		{"std base64 alphabet", good[:5] + "+" + good[6:], t0, keyA, policy, ErrMalformed},
		{"non-canonical nonce", ch.Value + "." + nonce[:10] + nonceTwin(nonce[10]), t0, keyA, policy, ErrMalformed},
		{"padded", good[:ChallengeLength+1+10] + "=", t0, keyA, policy, ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.VerifyAt(tc.at, tc.proof, tc.key, tc.policy)
			if err == nil {
				t.Fatalf("VerifyAt(%q) = nil, want an error", tc.proof)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("VerifyAt(%q) = %v, want %v", tc.proof, err, tc.want)
			}
		})
	}
}

// nonceTwin returns a base64url character that decodes to the same byte as c
// in the last position of an 11-character nonce (it differs only in the 2
// unused low bits), or "!" if c has none.
func nonceTwin(c byte) string {
	v := b64Rev[c]
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	return string(alphabet[v^1])
}

func TestRedeemOncePerInstance(t *testing.T) {
	c := newTest(t, 8)
	ch := c.IssueAt(t0, keyA, policy)
	proof := solve(t, ch.Value)
	if _, err := c.RedeemAt(t0, proof, keyA, policy); err != nil {
		t.Fatalf("first RedeemAt = %v, want nil", err)
	}
	if _, err := c.RedeemAt(t0.Add(time.Second), proof, keyA, policy); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replayed RedeemAt = %v, want ErrReplayed", err)
	}
	// Another instance (its own cache) accepts it once: that is the
	// documented per-instance bound.
	other := newTest(t, 8)
	if _, err := other.RedeemAt(t0.Add(time.Second), proof, keyA, policy); err != nil {
		t.Fatalf("RedeemAt on another instance = %v, want nil", err)
	}
	// Once expired, the proof is refused as expired and its entry is gone.
	if _, err := c.RedeemAt(ch.Expires, proof, keyA, policy); !errors.Is(err, ErrExpired) {
		t.Fatalf("RedeemAt after expiry = %v, want ErrExpired", err)
	}
	c.replay.Spend(ID{0xff}, 0, 1, ch.Expires.Add(time.Hour), ch.Expires)
	if n := c.replay.Len(); n != 1 {
		t.Errorf("replay cache holds %d entries after the proof expired, want 1 (the new one)", n)
	}
}

func TestRotation(t *testing.T) {
	old := newTest(t, 8, secretA)
	ch := old.IssueAt(t0, keyA, policy)
	proof := solve(t, ch.Value)
	// Step 2 of a rotation: the new secret signs, the old one still verifies.
	both := newTest(t, 8, secretB, secretA)
	if _, err := both.VerifyAt(t0, proof, keyA, policy); err != nil {
		t.Fatalf("ring [B, A] rejects a challenge signed by A: %v", err)
	}
	if got := both.IssueAt(t0, keyA, policy); got.Value == "" {
		t.Fatal("no challenge")
	} else if _, err := old.VerifyAt(t0, solve(t, got.Value), keyA, policy); !errors.Is(err, ErrSignature) {
		t.Errorf("ring [A] accepts a challenge signed by B: %v", err)
	}
	// Step 3: A retired.
	onlyB := newTest(t, 8, secretB)
	if _, err := onlyB.VerifyAt(t0, proof, keyA, policy); !errors.Is(err, ErrSignature) {
		t.Errorf("ring [B] = %v for a challenge signed by retired A, want ErrSignature", err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"no secrets", Config{}, nil},
		{"short secret", Config{Secrets: [][]byte{make([]byte, 31)}}, isecret.ErrShort},
		{"short second secret", Config{Secrets: [][]byte{secretA, []byte("short")}}, isecret.ErrShort},
		{"bits 33", Config{Secrets: [][]byte{secretA}, Bits: 33}, nil},
		{"bits -1", Config{Secrets: [][]byte{secretA}, Bits: -1}, nil},
		{"ttl 11m", Config{Secrets: [][]byte{secretA}, TTL: 11 * time.Minute}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil {
				t.Fatal("New = nil error, want one")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("New = %v, want %v", err, tc.want)
			}
			for _, s := range tc.cfg.Secrets {
				if len(s) > 4 && strings.Contains(err.Error(), string(s)) {
					t.Errorf("error %q contains the secret", err)
				}
			}
		})
	}
	c, err := New(Config{Secrets: [][]byte{secretA}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Bits() != DefaultBits || c.TTL() != DefaultTTL || c.ReplayCache() == nil {
		t.Errorf("defaults = %d bits, %v, cache %v; want %d, %v, a cache", c.Bits(), c.TTL(), c.ReplayCache(), DefaultBits, DefaultTTL)
	}
}

func TestSolve(t *testing.T) {
	c := newTest(t, 12)
	for i := range 4 {
		ch := c.IssueAt(t0, keyA, policy)
		one, err := (&Solver{Workers: 1}).Solve(context.Background(), ch.Value)
		if err != nil {
			t.Fatal(err)
		}
		many, err := (&Solver{Workers: 4}).Solve(context.Background(), ch.Value)
		if err != nil {
			t.Fatal(err)
		}
		if one != many {
			t.Errorf("challenge %d: 1 worker found %q, 4 workers %q; want the same smallest nonce", i, one, many)
		}
		if _, err := c.VerifyAt(t0, many, keyA, policy); err != nil {
			t.Errorf("challenge %d: Verify(Solve) = %v", i, err)
		}
		st, _ := ParseChallenge(ch.Value)
		p, _ := c.VerifyAt(t0, one, keyA, policy)
		for n := uint64(0); n < p.Nonce; n++ {
			if zeros(ch.Value, n) >= st.Bits {
				t.Fatalf("challenge %d: nonce %d also solves it but Solve returned %d", i, n, p.Nonce)
			}
		}
	}
	if got, err := Solve(context.Background(), c.IssueAt(t0, keyA, policy).Value); err != nil || len(got) != ProofLength {
		t.Errorf("Solve = %q, %v; want a %d-character proof", got, err, ProofLength)
	}
}

func TestSolveErrors(t *testing.T) {
	hard := newTest(t, 32).IssueAt(t0, keyA, policy).Value
	if _, err := (&Solver{MaxBits: 20}).Solve(context.Background(), hard); !errors.Is(err, ErrTooHard) {
		t.Errorf("Solve(32 bits, MaxBits 20) = %v, want ErrTooHard", err)
	}
	if _, err := Solve(context.Background(), "not a challenge"); !errors.Is(err, ErrMalformed) {
		t.Errorf("Solve(garbage) = %v, want ErrMalformed", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Solve(ctx, hard); !errors.Is(err, context.Canceled) {
		t.Errorf("Solve(cancelled ctx) = %v, want context.Canceled", err)
	}
	// Cancelled while working: the progress callback cancels after the first
	// report; a 32-bit challenge is never solved that soon.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	var reports int
	s := &Solver{Workers: 2, Progress: func(uint64) { reports++; cancel() }}
	if _, err := s.Solve(ctx, hard); !errors.Is(err, context.Canceled) {
		t.Errorf("Solve cancelled during work = %v, want context.Canceled", err)
	}
	if reports == 0 {
		t.Error("Progress was never called")
	}
}

// TestExpectedWork pins the mean work of the deterministic challenges used
// here: the smallest nonce + 1 is the number of hashes a sequential solver
// computes, which averages 2^bits.
func TestExpectedWork(t *testing.T) {
	c := newTest(t, 8)
	const n = 512
	var total float64
	for range n {
		ch := c.IssueAt(t0, keyA, policy)
		p, err := c.VerifyAt(t0, solve(t, ch.Value), keyA, policy)
		if err != nil {
			t.Fatal(err)
		}
		total += float64(p.Nonce + 1)
	}
	mean := total / n
	t.Logf("8 bits: mean %.1f hashes over %d challenges (expected %.0f)", mean, n, ExpectedTries(8))
	if mean < 0.8*ExpectedTries(8) || mean > 1.2*ExpectedTries(8) {
		t.Errorf("mean work %.1f, want within 20%% of %v", mean, ExpectedTries(8))
	}
}

func TestDecodeB64MatchesStrictStdlib(t *testing.T) {
	strict := base64.RawURLEncoding.Strict()
	r := mrand.New(mrand.NewPCG(1, 2))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/="
	for range 20000 {
		n := r.IntN(8)
		dst := make([]byte, n)
		s := make([]byte, base64.RawURLEncoding.EncodedLen(n))
		for i := range s {
			s[i] = alphabet[r.IntN(len(alphabet)-3*r.IntN(2))]
		}
		want, err := strict.DecodeString(string(s))
		ok := decodeB64(dst, string(s))
		if ok != (err == nil) || ok && string(dst) != string(want) {
			t.Fatalf("decodeB64(%q) = %v %x, stdlib %x %v", s, ok, dst, want, err)
		}
	}
}

func TestLeadingZeroBits(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want int
	}{
		{nil, 0}, {[]byte{0x80}, 0}, {[]byte{0x01}, 7}, {[]byte{0, 0x40}, 9}, {[]byte{0, 0, 0}, 24}, {[]byte{0, 0, 0, 1}, 31},
	} {
		if got := LeadingZeroBits(tc.in); got != tc.want {
			t.Errorf("LeadingZeroBits(%x) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestAssets(t *testing.T) {
	if !strings.Contains(ScriptJS, "EdgelimitPow") || !strings.Contains(DemoHTML, `src="pow.js"`) {
		t.Fatal("embedded assets are missing their content")
	}
	page := DemoPage("get", `/a"b`)
	if !strings.Contains(page, `data-method="GET"`) || !strings.Contains(page, `data-path="/a&#34;b"`) {
		t.Errorf("DemoPage did not set (and escape) the route")
	}
	if DemoPage("", "") != DemoHTML {
		t.Error("DemoPage with no route changed the page")
	}
	for _, tc := range []struct {
		h    http.Handler
		want string
	}{{ScriptHandler(), "text/javascript"}, {DemoHandler("POST", "/tts"), "text/html"}} {
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if ct := rec.Header().Get("Content-Type"); rec.Code != 200 || !strings.HasPrefix(ct, tc.want) || rec.Body.Len() == 0 {
			t.Errorf("GET = %d %q (%d bytes), want 200 %s", rec.Code, ct, rec.Body.Len(), tc.want)
		}
		rec = httptest.NewRecorder()
		tc.h.ServeHTTP(rec, httptest.NewRequest("POST", "/", nil))
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("POST = %d, want 405", rec.Code)
		}
	}
}

// lockedReader makes a deterministic reader safe for concurrent use, as
// Config.Rand must be.
type lockedReader struct {
	mu sync.Mutex
	r  *mrand.ChaCha8
}

func (l *lockedReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Read(p)
}
