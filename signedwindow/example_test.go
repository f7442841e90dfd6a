package signedwindow_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/signedwindow"
)

func ExampleParseKeyRing() {
	// EDGELIMIT_SECRETS: newest (signing) key first. Generate entries with
	// signedwindow.NewKey (what `edgelimit keygen` prints).
	keys, err := signedwindow.ParseKeyRing("k2:c2lnbmVkd2luZG93LWV4YW1wbGUtc2VjcmV0LTItMDEyMzQ1Njc4OQ==,k1:c2lnbmVkd2luZG93LWV4YW1wbGUtc2VjcmV0LTEtMDEyMzQ1Njc4OQ==")
	if err != nil {
		panic(err)
	}
	fmt.Println(keys) // never shows the secrets
	// Errors name the entry and what is wrong with it, never its text.
	_, err = signedwindow.ParseKeyRing("k1:dG9vIHNob3J0")
	fmt.Println(err)
	// Output:
	// signedwindow.KeyRing{k2 (signs), k1}
	// signedwindow: bad key: entry 1 of EDGELIMIT_SECRETS: the secret decodes to 9 bytes; it needs at least 32; expected kid:base64, like k1:<44 base64 characters> (`edgelimit keygen` prints one)
}

func ExampleNewKey() {
	entry := signedwindow.NewKey() // like "k1f0c3a9b:3q2+7w...="
	id, secret, _ := strings.Cut(entry, ":")
	fmt.Println(len(id), len(secret))
	// Output: 9 44
}

// A policy without proof_of_work: the first request of a window mints a
// token for free, and the client carries the count.
func ExampleLimiter() {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	keys, _ := signedwindow.ParseKeyRing("k1:c2lnbmVkd2luZG93LWV4YW1wbGUtc2VjcmV0LTEtMDEyMzQ1Njc4OQ==")
	l, err := signedwindow.New(signedwindow.Config{
		Policy: &policy.Policy{Name: "search", Limit: 2, Window: time.Minute},
		Keys:   keys,
		Now:    func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	// The client's request headers, where its token travels.
	h := http.Header{}
	req := edgelimit.Request{Key: "x4mrL0ZvN1cQ9bAqP7sT2w", Header: h} // the engine's hashed client key
	for i := range 4 {
		if i == 3 {
			now = t0.Add(time.Minute) // the window ended
		}
		d, _ := l.Allow(context.Background(), req)
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
		if d.Response != nil { // the response's Edgelimit-Token...
			h.Set(d.Response.Field.Name, d.Response.Field.Value) // ...which the client sends back
		}
	}
	// Output:
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=1m0s
	// allowed=true remaining=1 retry-after=0s
}

// A policy with proof_of_work: no token means a challenge; a proof buys a
// window worth the limit.
func ExampleLimiter_proofOfWork() {
	t0 := time.Unix(1_700_000_000, 0)
	keys, _ := signedwindow.ParseKeyRing("k1:c2lnbmVkd2luZG93LWV4YW1wbGUtc2VjcmV0LTEtMDEyMzQ1Njc4OQ==")
	l, _ := signedwindow.New(signedwindow.Config{
		Policy:  &policy.Policy{Name: "tts", Limit: 3, Window: time.Minute},
		Options: &signedwindow.Options{ProofOfWork: &signedwindow.ProofOfWork{Bits: 8, TTL: 10 * time.Second}},
		Keys:    keys,
		Now:     func() time.Time { return t0 },
	})
	h := http.Header{}
	req := edgelimit.Request{Key: "x4mrL0ZvN1cQ9bAqP7sT2w", Header: h}
	d, _ := l.Allow(context.Background(), req)
	challenge := header(d, signedwindow.HeaderChallenge) // and in the 429's problem body
	st, _ := pow.ParseChallenge(challenge)
	fmt.Println("allowed:", d.Allowed, "challenge bits:", st.Bits)

	proof, _ := pow.Solve(context.Background(), challenge)
	h.Set(signedwindow.HeaderProof, proof)
	for range 4 {
		d, _ = l.Allow(context.Background(), req)
		fmt.Println("allowed:", d.Allowed, "remaining:", d.Remaining, "new challenge:", header(d, signedwindow.HeaderChallenge) != "")
		if tok := header(d, signedwindow.HeaderToken); tok != "" {
			h.Set(signedwindow.HeaderToken, tok)
		}
	}
	// Output:
	// allowed: false challenge bits: 8
	// allowed: true remaining: 2 new challenge: false
	// allowed: true remaining: 1 new challenge: false
	// allowed: true remaining: 0 new challenge: false
	// allowed: false remaining: 0 new challenge: true
}

// header returns the value of a field a decision hands the client.
func header(d edgelimit.Decision, name string) string {
	if d.Response != nil && d.Response.Field.Name == name {
		return d.Response.Field.Value
	}
	return ""
}
