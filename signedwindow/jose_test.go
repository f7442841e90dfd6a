package signedwindow

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/keyhash"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// The verification example of docs/signed.md ("Verifying a token
// elsewhere") is testdata/verify_jose.mjs, run under Node with jose from
// the repository's node_modules (package-lock.json pins it) by
// testdata/verify_jose_run.mjs.
const (
	joseExample = "testdata/verify_jose.mjs"
	joseHarness = "testdata/verify_jose_run.mjs"
	signedDoc   = "../docs/signed.md"
	// joseDocMarker precedes the example's code block in docs/signed.md.
	joseDocMarker = "<!-- signedwindow/testdata/verify_jose.mjs -->"
)

// joseCase is one token for the harness to verify.
type joseCase struct {
	Name          string `json:"name"`
	Token         string `json:"token"`
	Policy        string `json:"policy"`
	RawKey        string `json:"rawKey,omitempty"`
	WindowSeconds int64  `json:"windowSeconds,omitempty"`
	Now           int64  `json:"now,omitempty"`
}

// joseResult is the harness's answer for one case.
type joseResult struct {
	Name    string         `json:"name"`
	OK      bool           `json:"ok"`
	Payload map[string]any `json:"payload"`
	Subject string         `json:"subject"`
	Code    string         `json:"code"`
	Claim   string         `json:"claim"`
	Message string         `json:"message"`
}

// nodeWithJose finds node and jose, or skips: on a developer's machine
// without them the test skips, in CI (CI=true) it fails.
func nodeWithJose(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: CI must run the jose verification example", what)
		}
		t.Skipf("%s; skipping the jose verification example", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed (Node 20 or later)")
	}
	if _, err := os.Stat("../node_modules/jose/package.json"); err != nil {
		missing("jose is not installed: run `make deps` (npm ci)")
	}
	return node
}

// runJose verifies cases with the doc's example under Node.
func runJose(t *testing.T, node, secrets, hashKey string, cases []joseCase) map[string]joseResult {
	t.Helper()
	in, err := json.Marshal(map[string]any{"secrets": secrets, "hashKey": hashKey, "cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, joseHarness)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", joseHarness, err, stderr.String())
	}
	var results []joseResult
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("harness output %q: %v", out, err)
	}
	byName := map[string]joseResult{}
	for _, r := range results {
		byName[r.Name] = r
	}
	return byName
}

// The example in docs/signed.md is the file the test runs, byte for byte.
func TestJoseExampleIsInTheDocs(t *testing.T) {
	doc, err := os.ReadFile(signedDoc)
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(joseExample)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), joseDocMarker)
	if !ok {
		t.Fatalf("%s has no %s", signedDoc, joseDocMarker)
	}
	after = strings.TrimLeft(after, "\n")
	if !strings.HasPrefix(after, "```js\n") {
		t.Fatalf("%s: a ```js block must follow %s", signedDoc, joseDocMarker)
	}
	block, _, ok := strings.Cut(strings.TrimPrefix(after, "```js\n"), "```\n")
	if !ok {
		t.Fatalf("%s: the block after %s is not closed", signedDoc, joseDocMarker)
	}
	if block != string(example) {
		t.Errorf("the example in %s differs from %s: copy the file into the doc", signedDoc, joseExample)
	}
}

// A token issued by the Go limiter verifies with jose exactly as
// docs/signed.md specifies it — the MAC key derived from the kid's secret
// with the token label, HS256 pinned, aud the policy, sub the hashed client
// key, exp - nbf the window — and jose refuses it tampered, for another
// policy or client, expired, or signed by a key outside the ring.
func TestJoseVerifiesIssuedTokens(t *testing.T) {
	node := nodeWithJose(t)

	// The deployment's secrets: the hash key (EDGELIMIT_HASH_KEY) and a ring
	// in rotation, k2 signing and k1 still verifying (EDGELIMIT_SECRETS).
	hashKey := bytes.Repeat([]byte{0x5a}, 32)
	k1, k2 := mustKey(t, "k1", secret1), mustKey(t, "k2", secret2)
	secrets := k2.Entry() + "," + k1.Entry()
	hasher, err := keyhash.New(hashKey)
	if err != nil {
		t.Fatal(err)
	}
	// The engine hashes a `key: ip` policy's client key as "i:" + its
	// address prefix.
	const rawKey, otherRawKey = "i:203.0.113.7/32", "i:198.51.100.1/32"
	key := hasher.Hash("tts", []byte(rawKey))

	c := newClock(t0)
	issue := func(keys *KeyRing, p *policy.Policy, token string) string {
		t.Helper()
		l, err := New(Config{Policy: p, Keys: keys, Now: c.Now})
		if err != nil {
			t.Fatal(err)
		}
		req := edgelimit.Request{Key: key}
		if token != "" {
			req.Header = limitertest.Headers{HeaderToken: token}
		}
		d, err := l.Allow(context.Background(), req)
		if err != nil || !d.Allowed || tokenOf(d) == "" {
			t.Fatalf("Allow = %+v, %v; want allowed with a token", d, err)
		}
		return tokenOf(d)
	}
	tts := signedPolicy("tts", 10, time.Minute, 0)
	first := issue(ring(t, k2, k1), tts, "")
	byOldKey := issue(ring(t, k1), tts, "") // before the rotation
	longer := issue(ring(t, k2, k1), signedPolicy("tts", 10, 2*time.Minute, 0), "")
	outsider := issue(ring(t, mustKey(t, "k3", []byte("signedwindow-test-secret-3-0123456789"))), tts, "")
	c.Add(5 * time.Second)
	second := issue(ring(t, k2, k1), tts, first) // the same window, n = 2

	now := t0.Add(10 * time.Second).Unix()
	exp := t0.Add(time.Minute).Unix()
	cases := []joseCase{
		{Name: "first", Token: first, Policy: "tts", RawKey: rawKey, WindowSeconds: 60, Now: now},
		{Name: "second", Token: second, Policy: "tts", RawKey: rawKey, WindowSeconds: 60, Now: now},
		{Name: "retiring key", Token: byOldKey, Policy: "tts", RawKey: rawKey, WindowSeconds: 60, Now: now},
		{Name: "no subject check", Token: second, Policy: "tts", Now: now},
		{Name: "tampered", Token: tamperCount(t, second, 1), Policy: "tts", RawKey: rawKey, Now: now},
		{Name: "wrong audience", Token: second, Policy: "search", Now: now},
		{Name: "other client", Token: second, Policy: "tts", RawKey: otherRawKey, Now: now},
		{Name: "expired", Token: second, Policy: "tts", RawKey: rawKey, Now: exp},
		{Name: "not yet valid", Token: second, Policy: "tts", RawKey: rawKey, Now: t0.Unix() - 1},
		{Name: "other window", Token: longer, Policy: "tts", RawKey: rawKey, WindowSeconds: 60, Now: now},
		{Name: "unknown key", Token: outsider, Policy: "tts", RawKey: rawKey, Now: now},
		{Name: "alg none", Token: algNone(t, second), Policy: "tts", RawKey: rawKey, Now: now},
	}
	got := runJose(t, node, secrets, base64.StdEncoding.EncodeToString(hashKey), cases)

	for _, tc := range []struct {
		name string
		n    float64
		kid  string
	}{{"first", 1, "k2"}, {"second", 2, "k2"}, {"retiring key", 1, "k1"}, {"no subject check", 2, "k2"}} {
		r := got[tc.name]
		if !r.OK {
			t.Errorf("%s: jose refused a token the server issued: %s %s", tc.name, r.Code, r.Message)
			continue
		}
		p := r.Payload
		if p["aud"] != "tts" || p["sub"] != key || p["n"] != tc.n || p["nbf"] != float64(t0.Unix()) || p["exp"] != float64(exp) {
			t.Errorf("%s: claims %v, want aud tts, sub %s, n %v, nbf %d, exp %d", tc.name, p, key, tc.n, t0.Unix(), exp)
		}
		if jti, _ := p["jti"].(string); len(jti) != 16 {
			t.Errorf("%s: jti %q, want 16 base64url characters", tc.name, jti)
		}
		if kid := headerKID(t, cases[indexOf(cases, tc.name)].Token); kid != tc.kid {
			t.Errorf("%s: kid %q, want %q", tc.name, kid, tc.kid)
		}
	}
	if r := got["first"]; r.Subject != key {
		t.Errorf("clientSubject = %q, the engine's hash is %q", r.Subject, key)
	}
	if got["first"].Payload["jti"] != got["second"].Payload["jti"] {
		t.Errorf("a window's tokens must share their jti: %v, %v", got["first"].Payload["jti"], got["second"].Payload["jti"])
	}

	for _, tc := range []struct{ name, code, claim, message string }{
		{"tampered", "ERR_JWS_SIGNATURE_VERIFICATION_FAILED", "", ""},
		{"wrong audience", "ERR_JWT_CLAIM_VALIDATION_FAILED", "aud", ""},
		{"other client", "ERR_JWT_CLAIM_VALIDATION_FAILED", "sub", ""},
		{"expired", "ERR_JWT_EXPIRED", "exp", ""},
		{"not yet valid", "ERR_JWT_CLAIM_VALIDATION_FAILED", "nbf", ""},
		{"other window", "", "", "not a window of this policy"},
		{"unknown key", "", "", "unknown key id"},
		{"alg none", "ERR_JOSE_ALG_NOT_ALLOWED", "", ""},
	} {
		r, ok := got[tc.name]
		switch {
		case !ok:
			t.Errorf("%s: no result", tc.name)
		case r.OK:
			t.Errorf("%s: jose accepted it: %v", tc.name, r.Payload)
		case r.Code != tc.code || r.Claim != tc.claim || !strings.Contains(r.Message, tc.message):
			t.Errorf("%s: refused with code %q claim %q (%s), want code %q claim %q %s", tc.name, r.Code, r.Claim, r.Message, tc.code, tc.claim, tc.message)
		}
	}

	// The Go side agrees on what is tampered: the limiter refuses it too.
	l, err := New(Config{Policy: tts, Keys: ring(t, k2, k1), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Verify(tamperCount(t, second, 1), key); !errors.Is(err, ErrSignature) {
		t.Errorf("Verify(tampered) = %v, want ErrSignature", err)
	}
}

// tamperCount rewrites the token's n claim, keeping its signature.
func tamperCount(t *testing.T, token string, n int) string {
	t.Helper()
	parts := strings.Split(token, ".")
	claims, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(claims, &m); err != nil {
		t.Fatal(err)
	}
	m["n"] = n
	b, _ := json.Marshal(m)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

// algNone is token's claims under an unsigned header.
func algNone(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"k2"}`)) + "." + parts[1] + "."
}

func headerKID(t *testing.T, token string) string {
	t.Helper()
	h, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Alg, Kid string
	}
	if err := json.Unmarshal(h, &v); err != nil || v.Alg != "HS256" {
		t.Fatalf("header %s: %v, want alg HS256", h, err)
	}
	return v.Kid
}

func indexOf(cases []joseCase, name string) int {
	for i, c := range cases {
		if c.Name == name {
			return i
		}
	}
	return -1
}
