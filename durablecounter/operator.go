package durablecounter

import (
	"context"
	"math/rand/v2"
	"slices"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// Reset forgets req's key's usage: it deletes every item that holds it, on
// every shard, under the policy's limits, each of its tiers', those of
// req.Limits (the override in force, if one is set) and any other limits
// this Counter decided with lately (a window other than the policy's
// counts in items of its own): for a fixed window the current window's and
// the previous one's, for the others the key's one item. The key's next
// request finds its whole quota. Grants stay (see Grant).
//
// This instance's deny cache forgets the key at once; other instances'
// entries answer at most DenyCacheMaxAge longer (1 s by default), and never
// past the denial's own retry time. Racing with live traffic, a reset is
// one DeleteItem per item: a request decided before it was counted in what
// it deletes, one decided after it counts from zero, and every item's
// incarnation (its g, gcra's period) keeps a refund of a spending made
// before the reset from giving anything back to the count after it.
func (c *Counter) Reset(ctx context.Context, req edgelimit.Request) error {
	if req.Key == "" {
		return ErrNoKey
	}
	t := c.instant(req)
	vs := []*variant{c.base}
	add := func(l policy.Limits) {
		if v, err := c.variantOf(c.effective(l)); err == nil && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	if !req.Limits.IsZero() {
		add(req.Limits)
	}
	if p := c.cfg.Policy; p.Tiers != nil {
		for _, name := range p.Tiers.Names {
			add(p.Tiers.Levels[name])
		}
	}
	c.variants.mu.RLock()
	for _, v := range c.variants.m {
		if v.err == nil && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	c.variants.mu.RUnlock()
	// The key's item at t, and at t one window earlier: for a fixed
	// window the previous window's item too (for a clock a little behind);
	// the others have one item per key.
	var ops []op
	seen := map[itemID]bool{}
	for _, v := range vs {
		for i, alg := range v.algs {
			for _, at := range [...]int64{t, t - int64(v.lim.Window)} {
				if id := alg.itemFor(req.Key, c.shardID(i), at); !seen[id] {
					seen[id] = true
					ops = append(ops, newOp(alg, id, 1, t))
				}
			}
		}
	}
	err := c.store.reset(ctx, ops)
	// Once the deletes landed (or some may have), nothing this instance
	// holds of the items may answer, nor a state a request of this
	// instance read before them (see invalidate).
	for i := range ops {
		c.invalidate(ops[i].id)
	}
	return err
}

// Charge spends req's units whether or not they fit: a cost known only
// after the response (charge: response, charge_status). It is exact: every
// unit charged is counted, on the same items and with the same one write
// as Allow, only without the condition that the units fit (for the sliding
// window and gcra, with the condition that keeps the item's structure,
// retried as Allow's is). A charge larger than what is left takes the
// quota beyond its limit once: the key is then denied, from the deny cache
// after the first denial, until the window frees what was over-spent (a
// fixed window: its end; a sliding window: until the over-spent count
// weighs little enough in the next window; a sliding log: until the units
// leave it; gcra: until the TAT is back within the tolerance), and its
// headers show r=0 with t and Retry-After until then. The Decision is the
// state after the charge, as for a request of one more unit: allowed while
// one fits.
//
// A sharded policy charges the first shard that has room for the whole
// cost (as Allow would); when none has, it over-spends a random shard,
// whose over-spend the other shards' room does not pay. Grants pay for
// requests, never for charges.
func (c *Counter) Charge(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if req.Key == "" {
		return edgelimit.Decision{}, ErrNoKey
	}
	v, err := c.variantFor(req)
	if err != nil {
		return edgelimit.Decision{}, err
	}
	t, cost := c.instant(req), req.Units()
	if v.lim.Limit == 0 { // nothing is ever admitted: nothing to charge
		d := v.algs[0].decision(state{}, t, 1, false)
		v.told(c.name, &d)
		return d, nil
	}
	shard := 0
	if c.shards > 1 {
		d, err := c.decideSharded(ctx, v, req, cost, t)
		if err != nil {
			return edgelimit.Decision{}, err
		}
		if d.Allowed {
			d.Receipt = edgelimit.Receipt{}
			v.told(c.name, &d)
			return d, nil
		}
		shard = rand.IntN(c.shards)
	}
	o := c.op(v, shard, req.Key, cost, t)
	gen := c.denyGen(&o)
	r, err := c.store.charge(ctx, o)
	if err != nil {
		return edgelimit.Decision{}, err
	}
	c.unpeek(o.id)
	switch {
	case r.d.Remaining == 0 || !r.d.Allowed:
		c.remember(&o, &r, 0, gen)
	case c.deny != nil:
		c.deny.del(o.id)
	}
	d := r.d
	v.told(c.name, &d)
	return d, nil
}
