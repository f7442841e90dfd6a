package edgelimit

import (
	"context"
	"slices"
	"time"
)

// This file is the engine's side of reservations: what a policy that
// settles after the response (charge: response, charge_status) reserves
// before the handler runs, and what it settles at after the response.
//
// A request reserves its units with Allow, exactly as a policy that
// charges up front spends them, so a reservation is admitted only if it
// fits: however many requests run at once, the reservations never spend
// more than the quota. After the response the engine settles each with
// the cost the request really had (Settler.Settle): the difference comes
// back, or the excess is charged whether or not it fits. So what a policy
// spends beyond its quota is at most the excesses (cost above reservation)
// of the requests in flight at once, and nothing when every reservation
// covers its cost.

type reservationKey struct{}

// reservation is one policy's reservation set by the application.
type reservation struct {
	policy string
	units  int64
}

// WithReservation returns parent carrying how many units the request will
// reserve of the named policy (one with charge: response) before its
// handler runs, instead of the policy's reserve (or cost), or hold of an
// in-flight policy (strategy inflight) while it runs, instead of the
// policy's cost ("this request holds 4 GPU slots"; released after the
// response, denied if more than the limit in force): an estimate
// only the application can make before the middleware decides, from what
// the request asks for (an LLM request's max_tokens, a file's declared
// size). Wrap the middleware's handler with a function that sets it on
// the request's context; in a Lambda handler, on the ctx the middleware's
// handler is called with. The request is admitted only if the reservation
// fits; after the response the engine settles with what the handler
// reported (Verdict.ReportCost, ReportCostFor). Units below 1 set nothing.
// Never derive it from a header the client controls without bounding it:
// a client that reserves too little only moves its spending to the
// settlement, but the bound on over-spending is the excesses in flight.
func WithReservation(parent context.Context, policy string, units int64) context.Context {
	if units < 1 {
		return parent
	}
	prev, _ := parent.Value(reservationKey{}).([]reservation)
	rs := append(slices.Clip(prev), reservation{policy: policy, units: units})
	return context.WithValue(parent, reservationKey{}, rs)
}

// reserved returns the units a request of c reserves: what the
// application set in ctx (WithReservation), else the policy's reserve,
// else its cost.
func reserved(ctx context.Context, c *compiled) int64 {
	if rs, ok := ctx.Value(reservationKey{}).([]reservation); ok {
		for i := len(rs) - 1; i >= 0; i-- {
			if rs[i].policy == c.Name {
				return rs[i].units
			}
		}
	}
	if c.Reserve > 0 {
		return c.Reserve
	}
	return c.Cost
}

// ReportCostFor reports what the request cost of one policy that settles
// after the response (charge: response), for a request with several such
// policies, each counting its own units (input tokens, output tokens):
// units are added to that policy's cost, and its report wins over
// ReportCost's. A handler calls it on the Verdict edgelimit.FromContext
// returns, once it knows. It reports whether the request has such a policy
// of that name (false for a misspelt name, or a policy the route does not
// have); units below 0 are ignored.
func (v *Verdict) ReportCostFor(policy string, units int64) bool {
	if v == nil || v.finish == nil || units < 0 {
		return false
	}
	for i := range v.finish.items {
		it := &v.finish.items[i]
		if it.c.Name == policy && it.c.ChargeAfter {
			it.cost.Add(units)
			it.reported.Store(true)
			return true
		}
	}
	return false
}

// settlement is what the request of it costs its policy, once the
// response's status is known: for charge: response the handler's report
// (its own, else ReportCost's, else the reservation stands), for
// charge_status the reservation for those statuses; zero (all given back)
// for a status in refund_status, or one charge_status does not count.
func (f *finishState) settlement(it *finishItem, status int) int64 {
	c := it.c
	if slices.Contains(c.RefundStatus, status) {
		return 0
	}
	if len(c.ChargeStatus) > 0 {
		if slices.Contains(c.ChargeStatus, status) {
			return it.req.Units()
		}
		return 0
	}
	switch {
	case it.reported.Load():
		return it.cost.Load()
	case f.reported.Load():
		return f.cost.Load()
	}
	return it.req.Units()
}

// settle settles one reservation with what the request cost, within the
// policy's budget from start: nothing to do when it cost what it reserved.
func (e *Engine) settle(ctx context.Context, start time.Time, f *finishState, it *finishItem, status int) (string, error) {
	cost := f.settlement(it, status)
	if cost == it.req.Units() {
		return "", nil
	}
	req := it.req
	req.At = e.now()
	what := "settle"
	if cost == 0 {
		what = "refund"
	}
	return what, e.afterCall(ctx, start, it.c, func(cctx context.Context) error {
		_, err := it.c.settler.Settle(cctx, req, it.d, cost)
		return err
	})
}

// beforeReservations makes the headers of an admitted request show, for
// each policy that settles after the response, what was left before its
// reservation: the request's own spending is known only at settlement,
// and the next response shows it.
func (e *Engine) beforeReservations(rs *routeSet, slots []slot) {
	for _, c := range rs.plain {
		if s := &slots[c.slot]; c.deferred && s.o == allowed && !s.d.Degraded {
			s.d.Remaining = min(s.d.Remaining+s.req.Units(), max(s.d.Limit, s.d.Remaining))
		}
	}
}
