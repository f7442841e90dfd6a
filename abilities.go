package edgelimit

import "github.com/edgelimit/edgelimit/policy"

// abilityTests pairs each ability a policy.Strategy declares with the
// interface that has it.
var abilityTests = []struct {
	a  policy.Abilities
	is func(Limiter) bool
}{
	{policy.CanRefund, is[Refunder]},
	{policy.CanPeek, is[Peeker]},
	{policy.CanCharge, is[Charger]},
	{policy.CanFinish, is[Finisher]},
	{policy.CanBatch, is[BatchLimiter]},
	{policy.CanLocal, is[Localizer]},
	{policy.CanQuota, is[Quoter]},
	{policy.CanReset, is[Resetter]},
	{policy.CanGrant, is[Granter]},
	{policy.CanSettle, is[Settler]},
}

func is[T any](l Limiter) bool {
	_, ok := l.(T)
	return ok
}

// abilitiesOf returns the optional abilities l implements itself (not
// those of a limiter it wraps), as a policy.Strategy declares them.
func abilitiesOf(l Limiter) policy.Abilities {
	var a policy.Abilities
	for _, t := range abilityTests {
		if t.is(l) {
			a |= t.a
		}
	}
	return a
}
