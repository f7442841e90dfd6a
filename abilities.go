package edgelimit

import "github.com/edgelimit/edgelimit/policy"

// abilitiesOf returns the optional abilities l implements itself (not
// those of a limiter it wraps), as a policy.Strategy declares them.
func abilitiesOf(l Limiter) policy.Abilities {
	var a policy.Abilities
	has := func(ok bool, b policy.Abilities) {
		if ok {
			a |= b
		}
	}
	_, ok := l.(Refunder)
	has(ok, policy.CanRefund)
	_, ok = l.(Peeker)
	has(ok, policy.CanPeek)
	_, ok = l.(Charger)
	has(ok, policy.CanCharge)
	_, ok = l.(Finisher)
	has(ok, policy.CanFinish)
	_, ok = l.(BatchLimiter)
	has(ok, policy.CanBatch)
	_, ok = l.(Localizer)
	has(ok, policy.CanLocal)
	_, ok = l.(Quoter)
	has(ok, policy.CanQuota)
	_, ok = l.(Resetter)
	has(ok, policy.CanReset)
	_, ok = l.(Granter)
	has(ok, policy.CanGrant)
	return a
}
