package signedwindow

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
)

func TestProofOfWorkBuysLimit(t *testing.T) {
	const limit = 5
	f := newFixture(t, signedPolicy("tts", limit, time.Minute, 8), nil)
	d := f.allow(t, keyA, "", "")
	if d.Allowed || challengeOf(d) == nil || challengeOf(d).Bits != 8 || d.Remaining != 0 || tokenOf(d) != "" {
		t.Fatalf("no token, no proof: %+v, want a denial with an 8-bit challenge", d)
	}
	if !challengeOf(d).Expires.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("challenge expires %v, want t0+10s", challengeOf(d).Expires)
	}
	for window := range 3 {
		proof := solve(t, challengeOf(d))
		f.clock.Add(time.Second)
		tok := ""
		for i := range limit {
			d = f.allow(t, keyA, tok, proof) // the proof rides along; only the first use spends it
			if !d.Allowed || d.Remaining != int64(limit-1-i) {
				t.Fatalf("window %d, request %d: %+v, want allowed with %d remaining", window, i, d, limit-1-i)
			}
			tok = tokenOf(d)
		}
		d = f.allow(t, keyA, tok, proof)
		if d.Allowed || challengeOf(d) == nil {
			t.Fatalf("window %d, request %d: %+v, want a challenge: a proof buys exactly %d", window, limit, d, limit)
		}
	}
}

func TestProofRejections(t *testing.T) {
	f := newFixture(t, signedPolicy("tts", 5, time.Minute, 8), nil)
	ch := challengeOf(f.allow(t, keyA, "", ""))
	proof := solve(t, ch)
	other := newFixture(t, signedPolicy("other", 5, time.Minute, 8), f.keys)

	for _, tc := range []struct {
		name  string
		key   string
		proof string
		at    time.Time
	}{
		{"another client's proof", keyB, proof, t0},
		{"expired proof", keyA, proof, ch.Expires},
		{"garbage", keyA, "x.y", t0},
		{"too few bits", keyA, ch.Value + ".AAAAAAAAAAA", t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.clock.Set(tc.at)
			if d := f.allow(t, tc.key, "", tc.proof); d.Allowed || challengeOf(d) == nil {
				t.Errorf("Allow = %+v, want a challenge", d)
			}
		})
	}
	f.clock.Set(t0)
	if d := other.allow(t, keyA, "", proof); d.Allowed {
		t.Error("another policy accepted the proof")
	}
	if d := f.allow(t, keyA, "", proof); !d.Allowed {
		t.Fatalf("the proof itself: %+v", d)
	}
	if d := f.allow(t, keyA, "", proof); d.Allowed || challengeOf(d) == nil {
		t.Errorf("the replayed proof: %+v, want a challenge", d)
	}
}

// TestTokenReplay: on one instance, each count of a chain is spent once and
// never after a later one.
func TestTokenReplay(t *testing.T) {
	f := newFixture(t, signedPolicy("tts", 10, time.Minute, 8), nil)
	proof := solve(t, challengeOf(f.allow(t, keyA, "", "")))
	t1 := tokenOf(f.allow(t, keyA, "", proof))
	t2 := tokenOf(f.allow(t, keyA, t1, ""))
	if d := f.allow(t, keyA, t1, ""); d.Allowed {
		t.Errorf("replayed t1 = %+v, want a challenge", d)
	}
	t3 := tokenOf(f.allow(t, keyA, t2, ""))
	if d := f.allow(t, keyA, t2, ""); d.Allowed {
		t.Errorf("replayed t2 = %+v", d)
	}
	if d := f.allow(t, keyA, t3, ""); !d.Allowed || d.Remaining != 6 {
		t.Errorf("t3 = %+v, want allowed with 6 remaining", d)
	}
	// A second instance has its own cache: t1 is spendable there once, and
	// its successor is the same token the first instance issued.
	g := newFixture(t, signedPolicy("tts", 10, time.Minute, 8), f.keys)
	if d := g.allow(t, keyA, t1, ""); !d.Allowed || tokenOf(d) != t2 {
		t.Errorf("t1 on another instance = %+v, want allowed, returning t2", d)
	}
	// Without proof of work, a replayed token is no token: a free window.
	free := newFixture(t, signedPolicy("tts", 10, time.Minute, 0), nil)
	u1 := tokenOf(free.allow(t, keyA, "", ""))
	free.allow(t, keyA, u1, "")
	d := free.allow(t, keyA, u1, "")
	if c, _ := free.l.Verify(tokenOf(d), keyA); !d.Allowed || c.Count != 1 {
		t.Errorf("replay without proof of work = %+v (count %d), want a fresh window", d, c.Count)
	}
}

func TestCost(t *testing.T) {
	p := signedPolicy("tts", 5, time.Minute, 0)
	f := newFixture(t, p, nil)
	req := edgelimit.Request{Key: keyA, Cost: 2}
	var rem []int64
	for range 4 {
		d, _ := f.l.Allow(context.Background(), req)
		if !d.Allowed {
			rem = append(rem, -1)
			continue
		}
		rem = append(rem, d.Remaining)
		req = withState(req, tokenOf(d), proofOf(req))
	}
	if got := rem; len(got) != 4 || got[0] != 3 || got[1] != 1 || got[2] != -1 || got[3] != -1 {
		t.Errorf("remaining after cost-2 requests = %v, want [3 1 denied denied]", got)
	}
	d, _ := f.l.Allow(context.Background(), edgelimit.Request{Key: keyA, Cost: 6})
	if d.Allowed || challengeOf(d) != nil || d.RetryAfter != time.Minute {
		t.Errorf("cost above the limit = %+v, want a plain denial", d)
	}
}

func TestSeveralTokensAndProofs(t *testing.T) {
	keys := ring(t)
	a := newFixture(t, signedPolicy("a", 5, time.Minute, 8), keys)
	b := newFixture(t, signedPolicy("b", 5, time.Minute, 8), keys)
	pa := solve(t, challengeOf(a.allow(t, keyA, "", "")))
	pb := solve(t, challengeOf(b.allow(t, keyA, "", "")))
	proofs := pb + ", " + pa
	ta := tokenOf(a.allow(t, keyA, "", proofs))
	tb := tokenOf(b.allow(t, keyA, "", proofs))
	if ta == "" || tb == "" {
		t.Fatal("a header with both proofs did not mint both windows")
	}
	tokens := ta + ", " + tb
	for _, f := range []*fixture{a, b} {
		if d := f.allow(t, keyA, tokens, ""); !d.Allowed || d.Remaining != 3 {
			t.Errorf("policy %s with both tokens: %+v, want its own token spent", f.l.name, d)
		}
	}
}

func TestRefund(t *testing.T) {
	f := newFixture(t, signedPolicy("tts", 5, time.Minute, 8), nil)
	ctx := context.Background()
	proof := solve(t, challengeOf(f.allow(t, keyA, "", "")))
	req := withState(edgelimit.Request{Key: keyA, Cost: 1}, "", proof)
	d, _ := f.l.Allow(ctx, req)
	if !d.Allowed {
		t.Fatal(d)
	}
	// Another policy denied: the token is not sent, the proof is refunded.
	if err := f.l.Refund(ctx, req, d); err != nil {
		t.Fatal(err)
	}
	d, _ = f.l.Allow(ctx, req)
	if !d.Allowed || d.Remaining != 4 {
		t.Fatalf("proof after refund = %+v, want a fresh window", d)
	}
	req = withState(edgelimit.Request{Key: keyA, Cost: 1}, tokenOf(d), "")
	d, _ = f.l.Allow(ctx, req)
	if !d.Allowed || d.Remaining != 3 {
		t.Fatalf("token = %+v", d)
	}
	f.l.Refund(ctx, req, d)
	d, _ = f.l.Allow(ctx, req)
	if !d.Allowed || d.Remaining != 3 {
		t.Fatalf("token after refund = %+v, want the same count again", d)
	}
	// No refund once a later count was spent.
	next := withState(edgelimit.Request{Key: keyA, Cost: 1}, tokenOf(d), "")
	f.l.Allow(ctx, next)
	f.l.Refund(ctx, req, d)
	if d, _ = f.l.Allow(ctx, req); d.Allowed {
		t.Errorf("an old token after a refund that came too late = %+v, want refused", d)
	}
}

// Regression (issue 10, item 4): a request carrying an already spent token
// and a fresh proof is admitted through the proof; when another policy
// denies it, the refund must give back the proof's window, not un-spend the
// old token.
func TestRefundUndoesOnlyThisDecision(t *testing.T) {
	f := newFixture(t, signedPolicy("tts", 2, time.Minute, 8), nil)
	ctx := context.Background()
	first := solve(t, challengeOf(f.allow(t, keyA, "", "")))
	d := f.allow(t, keyA, "", first)
	old := tokenOf(d)
	if d = f.allow(t, keyA, old, ""); !d.Allowed { // spends old's count: old is now spent
		t.Fatal(d)
	}
	fresh := solve(t, challengeOf(f.allow(t, keyA, old, "")))
	req := withState(edgelimit.Request{Key: keyA, Cost: 1}, old, fresh)
	d, _ = f.l.Allow(ctx, req)
	if !d.Allowed || d.Remaining != 1 {
		t.Fatalf("spent token + fresh proof = %+v, want admitted through the proof", d)
	}
	if err := f.l.Refund(ctx, req, d); err != nil {
		t.Fatal(err)
	}
	if got := f.allow(t, keyA, old, ""); got.Allowed {
		t.Errorf("the spent token after the refund = %+v, want still refused", got)
	}
	if got := f.allow(t, keyA, "", fresh); !got.Allowed || got.Remaining != 1 {
		t.Errorf("the fresh proof after the refund = %+v, want a fresh window (the refund gave it back)", got)
	}
}

func TestPeekSpendsNothing(t *testing.T) {
	f := newFixture(t, signedPolicy("tts", 2, time.Minute, 8), nil)
	ctx := context.Background()
	p, _ := f.l.Peek(ctx, edgelimit.Request{Key: keyA})
	if p.Allowed || challengeOf(p) == nil {
		t.Fatalf("Peek without state = %+v, want a challenge", p)
	}
	proof := solve(t, challengeOf(p))
	req := withState(edgelimit.Request{Key: keyA}, "", proof)
	for range 3 {
		if p, _ = f.l.Peek(ctx, req); !p.Allowed || p.Remaining != 1 || tokenOf(p) != "" {
			t.Fatalf("Peek with a proof = %+v, want would-allow, remaining 1, no token", p)
		}
	}
	d := f.allow(t, keyA, "", proof)
	if !d.Allowed || d.Remaining != 1 {
		t.Fatalf("Allow after peeks = %+v, want the proof unspent", d)
	}
	if p, _ = f.l.Peek(ctx, req); p.Allowed {
		t.Errorf("Peek with the spent proof = %+v, want denied", p)
	}
	tok := withState(edgelimit.Request{Key: keyA}, tokenOf(d), "")
	if p, _ = f.l.Peek(ctx, tok); !p.Allowed || p.Remaining != 0 {
		t.Errorf("Peek with the token = %+v, want would-allow, remaining 0", p)
	}
	if d = f.allow(t, keyA, tokenOf(d), ""); !d.Allowed {
		t.Errorf("Allow with the peeked token = %+v, want allowed", d)
	}
}

// TestEngine runs the real engine: 429 with Edgelimit-Challenge and the
// challenge in the problem body, then Edgelimit-Token on allowed responses;
// and a route whose other policy denies refunds the signed one.
// testGate is a strategy for a stand-in policy that the tests open and
// close by hand.
var testGate = &policy.Strategy{Name: "test-gate", Parse: func(*policy.Fields) any { return nil }}

func init() { policy.Register(testGate) }

func TestEngine(t *testing.T) {
	file, err := policy.Parse("test.yaml", []byte(`
version: 1
policies:
  - name: tts
    routes: ["POST /tts", "POST /both"]
    key: ip
    strategy: signed
    limit: 3
    window: 1m
    proof_of_work: {bits: 8, ttl: 10s}
  - name: gate
    routes: ["POST /both"]
    key: ip
    strategy: test-gate
    limit: 100
    window: 1m
`))
	if err != nil {
		t.Fatal(err)
	}
	c := newClock(t0)
	keys := ring(t)
	gateOpen := false
	e, err := edgelimit.New(edgelimit.Config{
		Policies:   file,
		HashSecret: []byte("engine-hash-secret-0123456789abcdef"),
		Now:        c.Now,
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			if p.Strategy == Strategy {
				return NewFactory(Config{Keys: keys, Now: c.Now})(p)
			}
			return limitertest.LimiterFunc(func(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
				return edgelimit.Decision{Allowed: gateOpen, Limit: 100, Window: time.Minute, RetryAfter: time.Second}, nil
			}), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	do := func(path, token, proof string) (*edgelimit.Verdict, map[string]string) {
		v := e.Decide(context.Background(), &edgelimit.Input{Method: "POST", Path: path, SourceIP: "203.0.113.7",
			Header: limitertest.Headers{"Edgelimit-Token": token, "Edgelimit-Proof": proof}})
		h := map[string]string{}
		for _, f := range v.Header() {
			h[f.Name] = f.Value
		}
		return v, h
	}

	v, h := do("/tts", "", "")
	if v.Allowed || v.Status != 429 || h["Edgelimit-Challenge"] == "" {
		t.Fatalf("first call: %d %v, want 429 with Edgelimit-Challenge", v.Status, h)
	}
	var body struct {
		limitertest.Problem
		Challenge *pow.Challenge `json:"challenge"`
	}
	if err := json.Unmarshal(v.Body, &body); err != nil || body.Challenge == nil || body.Challenge.Value != h["Edgelimit-Challenge"] || body.Challenge.Bits != 8 {
		t.Fatalf("problem body %s: want the challenge in it", v.Body)
	}
	proof, err := pow.Solve(context.Background(), h["Edgelimit-Challenge"])
	if err != nil {
		t.Fatal(err)
	}
	v, h = do("/tts", "", proof)
	if !v.Allowed || h["Edgelimit-Token"] == "" || h["RateLimit"] != `"tts";r=2;t=60` {
		t.Fatalf("with proof: %v %v, want allowed, a token, r=2", v.Allowed, h)
	}
	tok := h["Edgelimit-Token"]

	// /both: the gate denies, so the signed policy's spend is refunded and
	// no token is sent; the client keeps using the same token.
	for range 3 {
		v, h = do("/both", tok, "")
		if v.Allowed || v.Status != 429 || h["Edgelimit-Token"] != "" || h["Edgelimit-Challenge"] != "" {
			t.Fatalf("/both with the gate closed: %d %v, want a plain 429 without token", v.Status, h)
		}
	}
	gateOpen = true
	v, h = do("/both", tok, "")
	if !v.Allowed || !strings.Contains(h["RateLimit"], `"tts";r=1`) {
		t.Fatalf("/both with the gate open: %v %v, want allowed with the refunded count (r=1)", v.Allowed, h)
	}
}

func TestNewValidates(t *testing.T) {
	keys := ring(t)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no policy", Config{Keys: keys}},
		{"no keys", Config{Policy: signedPolicy("tts", 1, time.Minute, 0)}},
		{"durable", Config{Policy: &policy.Policy{Name: "x", Strategy: &policy.Strategy{Name: "durable"}, Limit: 1, Window: time.Second}, Keys: keys}},
		{"limit 0", Config{Policy: signedPolicy("tts", 0, time.Minute, 0), Keys: keys}},
		{"no window", Config{Policy: signedPolicy("tts", 1, 0, 0), Keys: keys}},
		{"quote in name", Config{Policy: signedPolicy(`t"s`, 1, time.Minute, 0), Keys: keys}},
		{"pow bits 40", Config{Policy: signedPolicy("tts", 1, time.Minute, 40), Keys: keys}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: New = nil error", tc.name)
		}
	}
	if _, err := NewFactory(Config{Keys: keys})(&policy.Policy{Name: "x", Strategy: &policy.Strategy{Name: "kv"}}); err == nil {
		t.Error("NewFactory built a limiter for a kv policy")
	}
}

func TestSubject(t *testing.T) {
	for _, key := range []string{keyA, `with "quotes"`, strings.Repeat("k", 200), "caf\u00e9", "a\\b"} {
		f := newFixture(t, signedPolicy("tts", 5, time.Minute, 0), nil)
		d := f.allow(t, key, "", "")
		if _, err := f.l.Verify(tokenOf(d), key); err != nil {
			t.Errorf("key %q: Verify = %v", key, err)
		}
		if _, err := f.l.Verify(tokenOf(d), key+"x"); !errors.Is(err, ErrSubject) {
			t.Errorf("key %q: Verify for another key = %v, want ErrSubject", key, err)
		}
	}
}

func TestNeverErrors(t *testing.T) {
	f := newFixture(t, signedPolicy("tts", 5, time.Minute, 8), nil)
	for _, req := range []edgelimit.Request{
		{}, {Key: keyA, Cost: -3}, withState(edgelimit.Request{Key: keyA}, strings.Repeat(",", 5000), ""), withState(edgelimit.Request{Key: keyA}, "", strings.Repeat("a.b,", 300)),
		withState(edgelimit.Request{Key: strings.Repeat("\x00", 2000)}, "a.b.c", "."),
	} {
		if _, err := f.l.Allow(context.Background(), req); err != nil {
			t.Errorf("Allow(%.40q) = %v", tokenIn(req), err)
		}
		if err := f.l.Refund(context.Background(), req, edgelimit.Decision{}); err != nil {
			t.Errorf("Refund = %v", err)
		}
	}
}

func TestDebugLog(t *testing.T) {
	var buf strings.Builder
	keys := ring(t)
	l, err := New(Config{Policy: signedPolicy("tts", 5, time.Minute, 8), Keys: keys, Now: func() time.Time { return t0 },
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	l.Allow(context.Background(), withState(edgelimit.Request{Key: keyA}, "a.b.c", "bad"))
	out := buf.String()
	if !strings.Contains(out, "token treated as absent") || !strings.Contains(out, "proof treated as absent") || !strings.Contains(out, "policy=tts") {
		t.Errorf("debug log = %q, want the reasons for the token and the proof", out)
	}
	if strings.Contains(out, "a.b.c") || strings.Contains(out, string(secret1)) {
		t.Errorf("debug log %q echoes client input or the secret", out)
	}
}
