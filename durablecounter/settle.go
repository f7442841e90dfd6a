package durablecounter

import (
	"context"

	"github.com/edgelimit/edgelimit"
)

// Settle settles the reservation that the allowed decision d spent for req
// (req.Units() units) with what the request really cost, after the
// response: a cost below the reservation gives the difference back on the
// items d spent on, by d's Receipt (as Refund does, so a window that has
// ended since keeps it: nothing it held matters any more), and a cost
// above it charges the excess whether or not it fits (as Charge does, at
// req.At, the settlement's instant). It is exact, on every algorithm and
// every store: the units a key is counted are its reservations until they
// are settled, then its costs. Reservations are admitted only when they
// fit, so requests whose costs do not exceed their reservations never
// spend beyond the limit, however many run at once; costs above their
// reservations spend at most the sum of their excesses beyond it. The
// Decision is the state after the settlement for one more unit, when the
// settlement wrote; d itself when there was nothing to settle.
func (c *Counter) Settle(ctx context.Context, req edgelimit.Request, d edgelimit.Decision, cost int64) (edgelimit.Decision, error) {
	if req.Key == "" {
		return edgelimit.Decision{}, ErrNoKey
	}
	reserved := req.Units()
	switch {
	case cost < 0:
		cost = 0
	case cost == reserved:
		return d, nil
	}
	part := req
	if cost < reserved {
		part.Cost = reserved - cost
		if err := c.Refund(ctx, part, d); err != nil {
			return edgelimit.Decision{}, err
		}
		d.Remaining = min(d.Remaining+part.Cost, max(d.Limit, d.Remaining))
		d.Allowed, d.RetryAfter, d.Receipt = true, 0, edgelimit.Receipt{}
		return d, nil
	}
	part.Cost = cost - reserved
	return c.Charge(ctx, part)
}
