package durablecounter

import (
	"context"
	"time"

	"github.com/edgelimit/edgelimit"
)

var _ edgelimit.UsageReader = (*Counter)(nil)

// Usage reads req's key's usage for an operator (Engine.Usage): what its
// quota has left (a Peek of one unit, without the grant), and what its
// grant has left and until when (one consistent read of its grant item,
// for a policy that takes grants). Remaining is their sum: what the key's
// next requests of one unit each can spend, the quota first, then the
// grant (a blocked key, Limits.Block, spends neither: 0). Every spending of
// other instances shows within PeekFreshness, as for Peek.
func (c *Counter) Usage(ctx context.Context, req edgelimit.Request) (edgelimit.Usage, error) {
	if req.Key == "" {
		return edgelimit.Usage{}, ErrNoKey
	}
	v, err := c.variantFor(req)
	if err != nil {
		return edgelimit.Usage{}, err
	}
	t := c.instant(req)
	one := req
	one.Cost = 1
	d, err := c.peek(ctx, v, one, t, 1)
	if err != nil {
		return edgelimit.Usage{}, err
	}
	v.told(c.name, &d)
	u := edgelimit.Usage{Decision: d, Quota: d.Remaining}
	if c.pool != nil {
		st, err := c.store.get(ctx, c.poolOp(req.Key, 1, t))
		if err != nil {
			return edgelimit.Usage{}, err
		}
		if c.pool.live(&st, t) && st.n > 0 {
			u.Grant = edgelimit.Grant{Units: st.n, Until: time.Unix(0, st.at).UTC()}
		}
	}
	if req.Limits.Block {
		u.Remaining, u.Allowed = 0, false
		return u, nil
	}
	u.Remaining = u.Quota + u.Grant.Units
	if !u.Allowed && u.Grant.Units > 0 {
		u.Allowed, u.RetryAfter, u.Reason = true, 0, "grant"
	}
	return u, nil
}
