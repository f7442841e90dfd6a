package powgate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/powgate"
)

// FuzzProofHeader: whatever Edgelimit-Proof holds, a Gate that asks every
// request for work never panics, and admits a request only for a distinct
// valid proof of this client and policy among the header's first
// candidates (each at most once), spending one unit for it.
func FuzzProofHeader(f *testing.F) {
	const bits = 4
	issuer, err := pow.New(pow.Config{Secrets: [][]byte{secret}, Bits: bits, TTL: 10 * time.Minute})
	if err != nil {
		f.Fatal(err)
	}
	proof := func(key, policy string) string { return solve(f, issuer.IssueAt(t0, key, policy).Value) }
	good, other := proof(keyA, "search"), proof(keyA, "other")
	for _, s := range []string{
		good, other, good + "," + good, other + ", " + good, proof(keyB, "search"),
		strings.Repeat(other+",", 7) + good, strings.Repeat(other+",", 8) + good,
		good[:len(good)-1] + "A", " " + good + " ", "", ",", "a.b", strings.Repeat("A", 60),
		good + "," + proof(keyA, "search") + "," + proof(keyA, "search"),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		fx := newFixture(t, inners[0], 10, time.Minute, powgate.Options{Above: 0, Bits: bits, TTL: 10 * time.Minute})
		// The distinct proofs the Gate may accept: valid ones among the
		// first candidates of a header it reads.
		valid := map[pow.ID]bool{}
		if len(header) <= pow.MaxProofHeader {
			rest := header
			for i := 0; i < pow.MaxProofCandidates && rest != ""; i++ {
				var one string
				one, rest, _ = strings.Cut(rest, ",")
				if p, err := issuer.VerifyAt(t0, strings.TrimSpace(one), keyA, "search"); err == nil {
					valid[p.ID()] = true
				}
			}
		}
		admitted := 0
		for range len(valid) + 2 {
			d, err := fx.gate.Allow(ctx, edgelimit.Request{Key: keyA, Header: limitertest.Headers{"edgelimit-proof": header}})
			switch {
			case err != nil:
				t.Fatalf("Allow(%q): %v", header, err)
			case d.Allowed && !powgate.Paid(d):
				t.Fatalf("Allow(%q) = %+v: admitted without work", header, d)
			case d.Allowed:
				admitted++
			case !powgate.Challenged(d):
				t.Fatalf("Allow(%q) = %+v: neither admitted nor challenged", header, d)
			}
		}
		if admitted != len(valid) {
			t.Fatalf("header %q: %d admissions, want %d (one per distinct valid proof)", header, admitted, len(valid))
		}
		if got := fx.peekInner(keyA).Remaining; got != int64(10-admitted) {
			t.Fatalf("header %q: remaining %d after %d admissions", header, got, admitted)
		}
	})
}
