package limitertest_test

import (
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/depstest"
)

// TestLinksNoStrategy: the conformance suite knows only the contract (the
// root package and policy), never a strategy, a store or an adapter, so
// that every strategy's tests can run it and a new strategy needs nothing
// of the others. Its in-flight suite once lived in inflight/storetest,
// which imported durablecounter and middleware.
func TestLinksNoStrategy(t *testing.T) {
	t.Parallel()
	const mod = "github.com/edgelimit/edgelimit/"
	allowed := map[string]bool{mod + "policy": true, mod + "limitertest": true}
	for _, p := range depstest.Links(t, mod+"limitertest") {
		if !strings.HasPrefix(p, mod) || allowed[p] || strings.HasPrefix(p, mod+"internal/") {
			continue
		}
		t.Errorf("limitertest links %s", p)
	}
	for _, p := range depstest.Links(t, mod+"limitertest") {
		if strings.HasPrefix(p, "github.com/aws/") {
			t.Errorf("limitertest links %s", p)
		}
	}
}
