package edgelimit_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/memory"
	"github.com/edgelimit/edgelimit/setup/signed"
)

// TestStrategiesDeclareTheirAbilities builds a limiter of every registered
// strategy, as a program does (setup and its in-process backends), and
// checks it has exactly the optional abilities its Strategy declares: the
// parser refuses fields by the declaration, the engine uses what the
// limiter has, and the two must not drift apart.
func TestStrategiesDeclareTheirAbilities(t *testing.T) {
	backends := []setup.Backend{memory.Durable(), memory.KV(), memory.InFlight(), signed.Backend()}
	secret := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	env := setup.BackendEnv{Getenv: func(k string) string {
		if k == setup.EnvSecrets {
			return "k1:" + secret
		}
		return ""
	}}
	seen := map[string]bool{}
	for _, b := range backends {
		seen[b.Strategy().Name] = true
	}
	for _, s := range policy.Strategies() {
		if !seen[s.Name] {
			t.Errorf("strategy %q has no backend in this test; add it", s.Name)
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			f, err := policy.Parse("t.yaml", []byte("version: 1\npolicies:\n  - {name: p, routes: [\"GET /x\"], key: ip, strategy: "+s.Name+", limit: 2, window: 1m}\n"))
			if err != nil {
				t.Fatal(err)
			}
			build, err := setup.Limiters(f, backends, env)
			if err != nil {
				t.Fatal(err)
			}
			l, err := build(f.Policies[0])
			if err != nil {
				t.Fatal(err)
			}
			if got, want := edgelimit.AbilitiesOf(l), s.Abilities; got != want {
				t.Errorf("%T has abilities %v; strategy %q declares %v", l, got, s.Name, want)
			}
		})
	}
}
