package policy

import (
	"fmt"
	"time"
)

// Breaker configures the circuit breaker of a policy's store
// (store_breaker). The engine keeps one breaker per store: after Failures
// store calls in a row failed or missed their budget, with no call answered
// while they were out, it opens, and every policy on the store is decided
// by its on_store_error at once, without a store call, for CoolDown; then
// it lets Probes calls through (half-open): the first that succeeds closes
// it, and once all of them failed it opens for another CoolDown. Policies on one store must configure it
// alike. A zero field takes its default (DefaultBreaker).
type Breaker struct {
	// Off: no breaker; every request asks the store, however long it has
	// been failing (store_breaker: off).
	Off bool
	// Failures is how many store calls in a row must fail (an error, or
	// the budget missed) to open the breaker; default 5.
	Failures int
	// CoolDown is how long the breaker stays open before it probes the
	// store; default 1s.
	CoolDown time.Duration
	// Probes is how many calls may probe the store (and fail) while the
	// breaker is half-open, before it opens again; default 3.
	Probes int
}

// DefaultBreaker is the breaker a policy gets when its file sets none: five
// failures in a row open it (one failure is a blip the next call survives;
// five in a row with no success between is a store that is not answering),
// for a second (so that the store, once back, counts again within about a
// second, and a dead store costs a few probes' budgets a second), three
// probes at a time (one slow answer of a store that is back does not keep
// it open another second).
var DefaultBreaker = Breaker{Failures: 5, CoolDown: time.Second, Probes: 3}

// Bounds of the store_breaker fields.
const (
	maxBreakerFailures = 1000
	minBreakerCoolDown = 10 * time.Millisecond
	maxBreakerCoolDown = 10 * time.Minute
	maxBreakerProbes   = 100
)

// OrDefault returns b with its zero fields taken from DefaultBreaker.
func (b Breaker) OrDefault() Breaker {
	if b.Failures <= 0 {
		b.Failures = DefaultBreaker.Failures
	}
	if b.CoolDown <= 0 {
		b.CoolDown = DefaultBreaker.CoolDown
	}
	if b.Probes <= 0 {
		b.Probes = DefaultBreaker.Probes
	}
	return b
}

// String returns b as a policy file writes it.
func (b Breaker) String() string {
	if b.Off {
		return "off"
	}
	b = b.OrDefault()
	return fmt.Sprintf("{failures: %d, cool_down: %s, probes: %d}", b.Failures, FormatDuration(b.CoolDown), b.Probes)
}

func parseStoreBreaker(p *fileParser, pol *Policy, v *Node) {
	const example = "store_breaker must be off or a mapping, like {failures: 5, cool_down: 1s, probes: 1}"
	if v.Kind == ScalarNode {
		if v.Value != "off" {
			p.errorf(v.Line, pol.Name, "%s", example)
			return
		}
		pol.StoreBreaker = Breaker{Off: true}
		return
	}
	if v.Kind != MappingNode {
		p.errorf(v.Line, pol.Name, "%s", example)
		return
	}
	b := DefaultBreaker
	known := []string{"failures", "cool_down", "probes"}
	for _, kv := range p.subfields(pol.Name, "store_breaker.", v, known) {
		k, fv := kv.key, kv.value
		switch k.Value {
		case "failures":
			if n, ok := p.int(fv, pol.Name, "store_breaker.failures"); ok {
				if n < 1 || n > maxBreakerFailures {
					p.errorf(fv.Line, pol.Name, "store_breaker.failures %d must be between 1 and %d", n, maxBreakerFailures)
				}
				b.Failures = int(n)
			}
		case "cool_down":
			if d, ok := p.duration(fv, pol.Name, "store_breaker.cool_down"); ok {
				if d < minBreakerCoolDown || d > maxBreakerCoolDown {
					p.errorf(fv.Line, pol.Name, "store_breaker.cool_down %s must be between %s and %s", FormatDuration(d),
						FormatDuration(minBreakerCoolDown), FormatDuration(maxBreakerCoolDown))
				}
				b.CoolDown = d
			}
		case "probes":
			if n, ok := p.int(fv, pol.Name, "store_breaker.probes"); ok {
				if n < 1 || n > maxBreakerProbes {
					p.errorf(fv.Line, pol.Name, "store_breaker.probes %d must be between 1 and %d", n, maxBreakerProbes)
				}
				b.Probes = int(n)
			}
		}
	}
	pol.StoreBreaker = b
}
