package setup

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/powgate"
)

// TestGatingWithoutPowgate: in a program built with -tags
// edgelimit.nopowgate (gate is nil, as the example functions have it), a
// policy file without proof_of_work builds its limiters as before, and one
// whose durable or kv policies ask for it is refused with ErrEnv naming
// them and the tag, before the key ring is even read. (With the gate
// linked, as in this test binary, TestGating* in env_test.go and the
// powgate tests cover the gate itself.)
func TestGatingWithoutPowgate(t *testing.T) {
	if gate == nil {
		t.Fatal("this test binary was built without the gate (edgelimit.nopowgate); the tests of package setup expect it")
	}
	saved := gate
	gate = nil
	t.Cleanup(func() { gate = saved })

	factory := func(*policy.Policy) (edgelimit.Limiter, error) { return nil, nil }
	plain := &policy.Policy{Name: "plain", Limit: 5, Window: time.Minute, Strategy: durablecounter.Strategy, Options: &durablecounter.Options{}}
	env := BackendEnv{Getenv: func(string) string { return "" }}
	if f, err := gating(&policy.File{Policies: []*policy.Policy{plain}}, factory, env); err != nil || f == nil {
		t.Fatalf("no proof_of_work: %v", err)
	}
	gated := &policy.Policy{Name: "gated", Limit: 5, Window: time.Minute, Strategy: durablecounter.Strategy,
		Options: &durablecounter.Options{ProofOfWork: &powgate.Options{Above: 3, Bits: 16}}}
	_, err := gating(&policy.File{Policies: []*policy.Policy{plain, gated}}, factory, env)
	if !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), "policies gated ask for proof of work") || !strings.Contains(err.Error(), "edgelimit.nopowgate") {
		t.Errorf("proof_of_work without the gate: %v, want ErrEnv naming the policy and the tag", err)
	}
}
