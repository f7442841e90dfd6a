package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/signedwindow"
)

// TestServeTokenVerifiesWithJose: a window token that `edgelimit serve`
// issued over HTTP verifies with jose as docs/signed.md ("Verifying a token
// elsewhere") says, with the example the doc shows
// (signedwindow/testdata/verify_jose.mjs): the MAC key derived from the
// kid's secret in EDGELIMIT_SECRETS, HS256, aud the policy, sub computed
// from EDGELIMIT_HASH_KEY and the client's raw key ("i:127.0.0.1/32": the
// request comes from loopback), exp - nbf the window. Unlike the
// signedwindow test, this one goes through the engine's key extraction and
// hashing, as deployed.
func TestServeTokenVerifiesWithJose(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFail(t, "node is not installed (Node 20 or later)")
	}
	dir := root(t)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "jose", "package.json")); err != nil {
		skipOrFail(t, "jose is not installed: run `make deps` (npm ci)")
	}
	// A signed policy without proof of work: the first request mints a
	// window. An hour, so that the token is still valid when node checks it
	// on the real clock, however slow the machine.
	policies := filepath.Join(t.TempDir(), "policies.yaml")
	const policyFile = "version: 1\npolicies:\n  - name: report\n    routes: [\"GET /report\"]\n    key: ip\n" +
		"    strategy: signed\n    limit: 5\n    window: 1h\n"
	if err := os.WriteFile(policies, []byte(policyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	secrets := signedwindow.NewKey() + "," + signedwindow.NewKey() // the first signs
	hashKey := randomKey()
	p := startServeProcess(t, map[string]string{"EDGELIMIT_SECRETS": secrets, "EDGELIMIT_HASH_KEY": hashKey}, "--policies", policies)
	if p.url == "" {
		t.Fatalf("edgelimit serve did not start:\n%s", p.output())
	}

	get := func(token string) string {
		t.Helper()
		req, err := http.NewRequest("GET", p.url+"/report", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set(signedwindow.HeaderToken, token)
		}
		resp, err := (&http.Client{Timeout: invokeTimeout}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		tok := resp.Header.Get(signedwindow.HeaderToken)
		if resp.StatusCode != http.StatusOK || tok == "" {
			t.Fatalf("GET /report: %d, token %q; want 200 with a token", resp.StatusCode, tok)
		}
		return tok
	}
	first := get("")
	second := get(first)

	type jcase struct {
		Name          string `json:"name"`
		Token         string `json:"token"`
		Policy        string `json:"policy"`
		RawKey        string `json:"rawKey,omitempty"`
		WindowSeconds int64  `json:"windowSeconds,omitempty"`
	}
	tampered := strings.Split(second, ".")
	tampered[2] = tampered[2][:len(tampered[2])-2] + flip(tampered[2][len(tampered[2])-2:])
	cases := []jcase{
		{Name: "first", Token: first, Policy: "report", RawKey: "i:127.0.0.1/32", WindowSeconds: 3600},
		{Name: "second", Token: second, Policy: "report", RawKey: "i:127.0.0.1/32", WindowSeconds: 3600},
		{Name: "tampered", Token: strings.Join(tampered, "."), Policy: "report", RawKey: "i:127.0.0.1/32"},
		{Name: "wrong audience", Token: second, Policy: "tts"},
		{Name: "other client", Token: second, Policy: "report", RawKey: "i:127.0.0.2/32"},
	}
	in, _ := json.Marshal(map[string]any{"secrets": secrets, "hashKey": hashKey, "cases": cases})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "signedwindow", "testdata", "verify_jose_run.mjs"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node verify_jose_run.mjs: %v\n%s", err, stderr.String())
	}
	var results []struct {
		Name    string
		OK      bool
		Payload map[string]any
		Code    string
		Claim   string
		Message string
	}
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("harness output %q: %v", out, err)
	}
	want := map[string]struct {
		ok          bool
		code, claim string
		n           float64
	}{
		"first":          {ok: true, n: 1},
		"second":         {ok: true, n: 2},
		"tampered":       {code: "ERR_JWS_SIGNATURE_VERIFICATION_FAILED"},
		"wrong audience": {code: "ERR_JWT_CLAIM_VALIDATION_FAILED", claim: "aud"},
		"other client":   {code: "ERR_JWT_CLAIM_VALIDATION_FAILED", claim: "sub"},
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %s", len(results), len(want), out)
	}
	for _, r := range results {
		w := want[r.Name]
		switch {
		case w.ok && !r.OK:
			t.Errorf("%s: jose refused the token serve issued: %s %s", r.Name, r.Code, r.Message)
		case w.ok && (r.Payload["aud"] != "report" || r.Payload["n"] != w.n):
			t.Errorf("%s: claims %v, want aud report, n %v", r.Name, r.Payload, w.n)
		case !w.ok && r.OK:
			t.Errorf("%s: jose accepted it: %v", r.Name, r.Payload)
		case !w.ok && (r.Code != w.code || r.Claim != w.claim):
			t.Errorf("%s: refused with %q claim %q (%s), want %q claim %q", r.Name, r.Code, r.Claim, r.Message, w.code, w.claim)
		}
	}
}

// flip changes a base64url string of two characters into another one that
// decodes to different bits.
func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}
