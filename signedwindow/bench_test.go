package signedwindow

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgelimit/edgelimit"
)

// BenchmarkBaselineJWT is the plain golang-jwt way to do what a decision
// does: parse an HS256 token into MapClaims (algorithm pinned, exp
// required), then sign a new token with the count incremented. No replay
// cache, no binding checks.
func BenchmarkBaselineJWT(b *testing.B) {
	secret := secret1
	claims := jwt.MapClaims{"aud": "tts", "sub": keyA, "jti": "AAAAAAAAAAAAAAAA", "nbf": t0.Unix(), "exp": t0.Add(time.Minute).Unix(), "n": 1}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	t.Header["kid"] = "k1"
	tok, err := t.SignedString(secret)
	if err != nil {
		b.Fatal(err)
	}
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return t0 }))
	keyFunc := func(*jwt.Token) (any, error) { return secret, nil }
	b.ReportAllocs()
	defer cpuTime(b)()
	for b.Loop() {
		parsed, err := parser.Parse(tok, keyFunc)
		if err != nil {
			b.Fatal(err)
		}
		mc := parsed.Claims.(jwt.MapClaims)
		n, _ := mc["n"].(float64)
		next := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"aud": mc["aud"], "sub": mc["sub"], "jti": mc["jti"], "nbf": mc["nbf"], "exp": mc["exp"], "n": n + 1,
		})
		next.Header["kid"] = "k1"
		if _, err := next.SignedString(secret); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecision is one allowed signed-window decision: verify the token
// (golang-jwt, HS256 pinned, typed claims, pooled HMAC), check binding and
// window, spend its count in the replay cache, re-sign. Each iteration
// presents the token the previous one returned, as a client does.
func BenchmarkDecision(b *testing.B) {
	f := newFixture(b, signedPolicy("tts", 1<<40, time.Minute, 0), nil)
	tok := tokenOf(f.allow(b, keyA, "", ""))
	req := edgelimit.Request{Key: keyA, Cost: 1}
	ctx := context.Background()
	b.ReportAllocs()
	defer cpuTime(b)()
	for b.Loop() {
		req = withState(req, tok, proofOf(req))
		d, _ := f.l.Allow(ctx, req)
		if !d.Allowed {
			b.Fatalf("denied: %+v", d)
		}
		tok = tokenOf(d)
	}
}

// BenchmarkDecisionParallel is BenchmarkDecision on every core, each
// goroutine a distinct client.
func BenchmarkDecisionParallel(b *testing.B) {
	f := newFixture(b, signedPolicy("tts", 1<<40, time.Minute, 0), nil)
	ctx := context.Background()
	var n int64
	var mu = make(chan struct{}, 1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mu <- struct{}{}
		n++
		key := fmt.Sprintf("client-%016d", n)
		<-mu
		req := edgelimit.Request{Key: key, Cost: 1}
		for pb.Next() {
			d, _ := f.l.Allow(ctx, req)
			if !d.Allowed {
				b.Errorf("denied: %+v", d)
				return
			}
			req = withState(req, tokenOf(d), proofOf(req))
		}
	})
}

// BenchmarkVerify is the verification half of a decision.
func BenchmarkVerify(b *testing.B) {
	f := newFixture(b, signedPolicy("tts", 10, time.Minute, 0), nil)
	tok := tokenOf(f.allow(b, keyA, "", ""))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.l.verify(t0, tok, keyA); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSign is the signing half of a decision.
func BenchmarkSign(b *testing.B) {
	f := newFixture(b, signedPolicy("tts", 10, time.Minute, 0), nil)
	k := f.keys.keys[0]
	b.ReportAllocs()
	for b.Loop() {
		k.sign("tts", keyA, [12]byte{1}, t0.Unix(), t0.Unix()+60, 2)
	}
}

// BenchmarkChallenge is a denial that issues a challenge (no token).
func BenchmarkChallenge(b *testing.B) {
	f := newFixture(b, signedPolicy("tts", 10, time.Minute, 16), nil)
	req := edgelimit.Request{Key: keyA, Cost: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := f.l.Allow(ctx, req); challengeOf(d) == nil {
			b.Fatal("no challenge")
		}
	}
}

// BenchmarkMintWithProof is a decision that redeems a proof and mints a
// window (each iteration a fresh proof, solved outside the timer).
func BenchmarkMintWithProof(b *testing.B) {
	f := newFixture(b, signedPolicy("tts", 10, time.Minute, 4), nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		d, _ := f.l.Allow(ctx, edgelimit.Request{Key: keyA, Cost: 1})
		proof := solve(b, challengeOf(d))
		b.StartTimer()
		if d, _ := f.l.Allow(ctx, withState(edgelimit.Request{Key: keyA, Cost: 1}, "", proof)); !d.Allowed {
			b.Fatalf("denied: %+v", d)
		}
	}
}
