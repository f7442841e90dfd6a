package policy

import (
	"time"
)

// MaxDelayCeiling bounds max_delay. A wait is billed Lambda time and API
// Gateway answers 504 after 29 s, so a wait is meant to be a few hundred
// milliseconds, never a queue of minutes.
const MaxDelayCeiling = 30 * time.Second

// parseMaxDelay reads max_delay: how long a request that does not fit now
// may wait for its turn instead of getting a 429 (Policy.MaxDelay).
func parseMaxDelay(p *fileParser, pol *Policy, v *Node) {
	d, ok := p.duration(v, pol.Name, "max_delay")
	if !ok {
		return
	}
	if d > MaxDelayCeiling {
		p.errorf(v.Line, pol.Name, "max_delay %s is longer than %s; a wait is billed time and API Gateway gives up after 29s, so keep it to a few hundred milliseconds", d, MaxDelayCeiling)
	}
	pol.MaxDelay = d
}

// needDelay refuses max_delay where nothing can wait: a strategy whose
// limiters cannot reserve a unit for a later turn (Strategy.Delay), a
// shadow policy (it never holds a request) and a policy that spends after
// the response (nothing is reserved when the request is admitted). A
// strategy's Parse may have said why already (its algorithm), at the
// field's line since before.
func (p *fileParser) needDelay(pol *Policy, fields map[string]*Node, line, before int) {
	if pol.MaxDelay == 0 {
		return
	}
	l := lineOf(fields, "max_delay", line)
	for _, e := range p.errs[before:] {
		if e.Line == l {
			return
		}
	}
	switch s := pol.Strategy; {
	case !s.Delay:
		p.errorf(l, pol.Name, "max_delay needs a strategy that can reserve a unit for a later turn (durable with algorithm: gcra, or kv); strategy %s cannot", s.Name)
	case pol.Shadow:
		p.errorf(l, pol.Name, "max_delay does not go with shadow: a shadow policy never holds a request")
	case pol.ChargeAfter || len(pol.ChargeStatus) > 0:
		p.errorf(l, pol.Name, "max_delay does not go with charge or charge_status: a policy that spends after the response reserves nothing to wait for")
	}
}
