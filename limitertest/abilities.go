package limitertest

import (
	"reflect"
	"testing"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// ability is one optional ability: its bit, and whether a limiter has it.
type ability struct {
	bit  policy.Abilities
	name string
	has  func(edgelimit.Limiter) bool
}

func abilityOf[T any](bit policy.Abilities) ability {
	return ability{bit: bit, name: reflect.TypeFor[T]().Name(), has: func(l edgelimit.Limiter) bool { _, ok := l.(T); return ok }}
}

// abilities are every ability policy.Abilities names, each with the
// interface of package edgelimit it stands for.
var abilities = []ability{
	abilityOf[edgelimit.Refunder](policy.CanRefund),
	abilityOf[edgelimit.Peeker](policy.CanPeek),
	abilityOf[edgelimit.Charger](policy.CanCharge),
	abilityOf[edgelimit.Finisher](policy.CanFinish),
	abilityOf[edgelimit.BatchLimiter](policy.CanBatch),
	abilityOf[edgelimit.Localizer](policy.CanLocal),
	abilityOf[edgelimit.Quoter](policy.CanQuota),
	abilityOf[edgelimit.Resetter](policy.CanReset),
	abilityOf[edgelimit.Granter](policy.CanGrant),
	abilityOf[edgelimit.Settler](policy.CanSettle),
}

// Abilities returns the optional abilities l implements itself (not those
// of a limiter it wraps), as a policy.Strategy declares them.
func Abilities(l edgelimit.Limiter) policy.Abilities {
	var a policy.Abilities
	for _, x := range abilities {
		if x.has(l) {
			a |= x.bit
		}
	}
	return a
}

// CheckAbilities fails t unless l, a limiter of strategy s, has exactly
// the optional abilities s declares: the parser refuses a policy's fields
// by the declaration (charge needs Charger, on_store_error: local a
// Localizer), the engine uses what the limiter has, and the two must not
// drift apart. The root's TestStrategiesDeclareTheirAbilities checks every
// strategy the module's backends link; a strategy it does not build (one
// of another module, registered with policy.Register, or one only tests
// compile) calls CheckAbilities from its own tests, with a limiter built as
// a program builds one.
func CheckAbilities(t testing.TB, s *policy.Strategy, l edgelimit.Limiter) {
	t.Helper()
	if got := Abilities(l); got != s.Abilities {
		t.Errorf("%T has abilities %v; strategy %q declares %v", l, got, s.Name, s.Abilities)
	}
}
