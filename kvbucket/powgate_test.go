package kvbucket_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/powgate"
)

// TestProofOfWorkGatesKV: a kv policy's proof_of_work, as the policy file
// declares it, is found by powgate.OptionsOf (so setup gates the policy),
// and through the engine the policy challenges above its threshold (a
// solved challenge buys one request) and denies at its limit, proof or
// not. Before, the kv strategy did not declare the field: a kv policy with
// proof_of_work was a policy file error, though docs/powgate.md said kv
// works.
func TestProofOfWorkGatesKV(t *testing.T) {
	const file = `version: 1
policies:
  - {name: search, routes: ["GET /search"], key: ip, strategy: kv, limit: 4, window: 1h, proof_of_work: {above: 2, bits: 8}}
`
	pf, err := policy.Parse("test.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	o := powgate.OptionsOf(pf.Policies[0])
	if o == nil || o.Above != 2 || o.Bits != 8 {
		t.Fatalf("powgate.OptionsOf = %+v, want above 2, bits 8", o)
	}
	clock := limitertest.NewClock(time.Unix(1_700_000_000, 0))
	kv := kvbucket.NewMemory(kvbucket.MemoryConfig{Now: clock.Now})
	build := func(p *policy.Policy) (edgelimit.Limiter, error) {
		return kvbucket.New(kvbucket.Config{Policy: p, KV: kv, Now: clock.Now})
	}
	e, err := edgelimit.New(edgelimit.Config{
		Policies:   pf,
		HashSecret: []byte(strings.Repeat("h", 32)),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:        clock.Now,
		Limiters: powgate.Gating(build, powgate.Config{
			Secrets: [][]byte{bytes.Repeat([]byte{9}, 32)}, Now: clock.Now, Replay: pow.NewReplayCache(0),
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	decide := func(proof string) (allowed bool, challenge string) {
		t.Helper()
		h := limitertest.Headers{}
		if proof != "" {
			h[powgate.HeaderProof] = proof
		}
		v := e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/search", SourceIP: "192.0.2.1", Header: h})
		for _, f := range v.Header() {
			if strings.EqualFold(f.Name, powgate.HeaderChallenge) {
				challenge = f.Value
			}
		}
		return v.Allowed, challenge
	}
	solve := func(ch string) string {
		t.Helper()
		if st, err := pow.ParseChallenge(ch); err != nil || st.Bits != 8 {
			t.Fatalf("challenge %q: %+v, %v; want 8 bits", ch, st, err)
		}
		p, err := (&pow.Solver{Workers: 1}).Solve(context.Background(), ch)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i := range 2 {
		if ok, ch := decide(""); !ok || ch != "" {
			t.Fatalf("request %d, below the threshold: allowed %v, challenge %q; want allowed, no challenge", i+1, ok, ch)
		}
	}
	for i := 3; i <= 4; i++ {
		ok, ch := decide("")
		if ok || ch == "" {
			t.Fatalf("request %d without a proof, above the threshold: allowed %v, challenge %q; want a challenge", i, ok, ch)
		}
		if ok, _ := decide(solve(ch)); !ok {
			t.Fatalf("request %d with the solved challenge: denied, want allowed", i)
		}
	}
	// At the limit: denied, and no challenge (work cannot pass it).
	ok, ch := decide("")
	if ok || ch != "" {
		t.Errorf("request 5, at the limit: allowed %v, challenge %q; want a denial without a challenge", ok, ch)
	}
}
