package signedwindow

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgelimit/edgelimit"
)

// FuzzVerifyToken feeds arbitrary Edgelimit-Token (and Edgelimit-Proof)
// headers to Verify and Allow. Properties: nothing panics or errors; a token
// Verify accepts is one stock golang-jwt also accepts (HS256, pinned) and is
// bound to this policy and client; Allow admits only with a token or a proof
// that verifies.
func FuzzVerifyToken(f *testing.F) {
	keys := ring(f)
	free := newFixture(f, signedPolicy("tts", 5, time.Minute, 0), keys)
	work := newFixture(f, signedPolicy("tts", 5, time.Minute, 4), keys)
	d := free.allow(f, keyA, "", "")
	f.Add(tokenOf(d), "")
	f.Add(tokenOf(free.allow(f, keyA, tokenOf(d), "")), "")
	f.Add(tokenOf(d)+", "+tokenOf(d), "")
	ch := challengeOf(work.allow(f, keyA, "", ""))
	proof := solve(f, ch)
	f.Add("", proof)
	f.Add(tokenOf(d), proof+","+proof)
	other := tokenOf(newFixture(f, signedPolicy("other", 5, time.Minute, 0), keys).allow(f, keyA, "", ""))
	f.Add(other+","+tokenOf(d), "")
	dk := derived(secret1)
	f.Add(rawToken(`{"alg":"none","kid":"k1"}`, `{"aud":"tts"}`, nil), "")
	f.Add(rawToken(`{"alg":"HS256","kid":"k1"}`, `{"aud":"tts","sub":"`+keyA+`","jti":"AAAAAAAAAAAAAAAA","nbf":1700000000,"exp":1700000060,"n":1,"n":2}`, dk), "")
	f.Add("a.b.c", "x.y")
	f.Add(strings.Repeat("A", 5000), "")

	parser := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return t0 }))
	f.Fuzz(func(t *testing.T, token, proofHeader string) {
		for _, fx := range []*fixture{free, work} {
			fx.clock.Set(t0)
		}
		if c, err := free.l.Verify(token, keyA); err == nil {
			if c.Policy != "tts" || c.Subject != keyA || c.Count < 1 {
				t.Fatalf("Verify(%q) = %+v: not bound to this policy and client", token, c)
			}
			if _, err := parser.Parse(token, func(*jwt.Token) (any, error) { return dk, nil }); err != nil {
				t.Fatalf("Verify accepted %q, which stock golang-jwt rejects: %v", token, err)
			}
		}
		for _, fx := range []*fixture{free, work} {
			req := withState(edgelimit.Request{Key: keyA, Cost: 1}, token, proofHeader)
			d, err := fx.l.Allow(context.Background(), req)
			if err != nil {
				t.Fatalf("Allow returned an error: %v", err)
			}
			if err := fx.l.Refund(context.Background(), req, edgelimit.Decision{}); err != nil {
				t.Fatalf("Refund returned an error: %v", err)
			}
			if fx == work && d.Allowed && !anyValid(fx, token, proofHeader) {
				t.Fatalf("Allow admitted token %q proof %q, neither of which verifies", token, proofHeader)
			}
			if d.Remaining < 0 || d.Remaining > 5 {
				t.Fatalf("Remaining %d out of range", d.Remaining)
			}
		}
	})
}

func anyValid(fx *fixture, tokens, proofs string) bool {
	for _, tok := range strings.Split(tokens, ",") {
		if _, err := fx.l.Verify(strings.TrimSpace(tok), keyA); err == nil {
			return true
		}
	}
	for _, p := range strings.Split(proofs, ",") {
		if _, err := fx.l.pow.Verify(strings.TrimSpace(p), keyA, "tts"); err == nil {
			return true
		}
	}
	return false
}
