package durablecounter

import (
	"context"

	"github.com/edgelimit/edgelimit"
)

// Peek reports whether req would be allowed now, and the policy's state,
// without spending anything; the decision has no Receipt. A denial it
// reports is real. It answers from the deny cache only where the cached
// state (a lower bound of the stored one) proves the denial; otherwise it
// reads the item (one consistent GetItem; a sharded policy reads its
// shards with one BatchGetItem) and remembers what the read showed in the
// deny cache, so that repeat peeks, and requests, of a key the read showed
// denied cost no call until it could fit. No cache can prove that anything
// fits: a peek that finds room answers from that read for PeekFreshness,
// then reads again. Whatever it answers shows every spending, refund and
// reset of this instance that landed before the peek began (a read that
// one overtook is not remembered); other instances' show within
// PeekFreshness.
func (c *Counter) Peek(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if req.Key == "" {
		return edgelimit.Decision{}, ErrNoKey
	}
	v, err := c.variantFor(req)
	if err != nil {
		return edgelimit.Decision{}, err
	}
	t, cost := c.instant(req), req.Units()
	d, err := c.peek(ctx, v, req, t, cost)
	if err == nil && !d.Allowed && !req.Limits.Block { // a blocked key spends no grant either
		d, err = c.fromGrant(ctx, req, cost, t, d, true)
	}
	if err != nil {
		return edgelimit.Decision{}, err
	}
	v.told(c.name, &d)
	return d, nil
}

// peek is Peek of the quota alone.
func (c *Counter) peek(ctx context.Context, v *variant, req edgelimit.Request, t, cost int64) (edgelimit.Decision, error) {
	if v.lim.Limit == 0 {
		return v.algs[0].decision(state{}, t, cost, false), nil
	}
	if c.shards == 1 {
		o := c.op(v, 0, req.Key, cost, t)
		d, denied, _, _ := c.cached(&o)
		if !denied {
			st, fresh := c.peekView(&o)
			if !fresh {
				pgen, dgen := c.peekGen(&o), c.denyGen(&o)
				var err error
				if st, err = c.store.get(ctx, o); err != nil {
					return edgelimit.Decision{}, err
				}
				c.peeked(&o, st, pgen)
				fits := o.rule.fits(st, t, cost)
				d = o.rule.decision(st, t, cost, fits)
				c.remember(&o, &result{ok: fits, known: true, st: st, d: d}, 0, dgen)
				return d, nil
			}
			d = o.rule.decision(st, t, cost, o.rule.fits(st, t, cost))
		}
		return d, nil
	}
	n := c.shards
	ops, ds := make([]op, n), make([]edgelimit.Decision, n)
	proven := 0
	for i := range n {
		ops[i] = c.op(v, i, req.Key, cost, t)
		if d, denied, _, _ := c.cached(&ops[i]); denied {
			ds[i] = d
			proven++
		}
	}
	if proven < n { // something may fit: read every shard
		sts, gens := make([]state, n), make([]uint64, n)
		for i := range ops {
			gens[i] = c.denyGen(&ops[i])
		}
		if err := c.store.read(ctx, ops, sts); err != nil {
			return edgelimit.Decision{}, err
		}
		for i := range ops {
			o := &ops[i]
			fits := o.rule.fits(sts[i], t, cost)
			ds[i] = o.rule.decision(sts[i], t, cost, fits)
			c.remember(o, &result{ok: fits, known: true, st: sts[i], d: ds[i]}, 0, gens[i])
			if fits {
				// What the shard has left, for the policy's sum.
				ds[i] = o.rule.decision(sts[i], t, cost, true)
			}
		}
	}
	return combine(ds), nil
}

// peekView returns what Peek read of o's item less than PeekFreshness ago.
func (c *Counter) peekView(o *op) (state, bool) {
	if c.peeks == nil {
		return state{}, false
	}
	return c.peeks.get(o.id, o.t)
}

// peekGen returns the peek cache's generation of o's item, to take before
// the read that peeked will remember. It marks the cache in use first, so
// that every spending that lands after the read began invalidates it
// (unpeek): a read that an admission of this instance overtook is never
// remembered (TestPeekShowsAnAdmissionDuringItsRead).
func (c *Counter) peekGen(o *op) uint64 {
	if c.peeks == nil {
		return 0
	}
	c.peekUsed.Store(true)
	return c.peeks.since(o.id)
}

// peeked remembers what Peek read of o's item, for PeekFreshness, unless
// this instance spent on it or refunded since gen (peekGen before the
// read).
func (c *Counter) peeked(o *op, st state, gen uint64) {
	if c.peeks != nil {
		c.peeks.putSince(o.id, o.rule.compact(st, o.t), o.t, o.t+int64(PeekFreshness), gen)
	}
}

// unpeek forgets what Peek read of an item this instance spent on or
// refunded, once the write has landed, and any read of it still on its
// way, so that its own spending always shows; until a peek has begun, it
// costs one atomic load.
func (c *Counter) unpeek(id itemID) {
	if c.peekUsed.Load() {
		c.peeks.invalidate(id)
	}
}

// combine reports the decisions of a sharded policy's shards as the
// policy's: allowed if any shard allows, with the units every shard has
// left and the soonest a unit comes back anywhere; else denied with what
// the best shard has left (less than the cost: a request must fit one
// shard), the soonest any shard could take the request, and the soonest a
// unit comes back anywhere.
func combine(ds []edgelimit.Decision) edgelimit.Decision {
	if len(ds) == 1 {
		return ds[0]
	}
	var out edgelimit.Decision
	for i, d := range ds {
		out.Allowed = out.Allowed || d.Allowed
		if i == 0 || d.Reset < out.Reset {
			out.Reset = d.Reset
		}
	}
	first := true
	for _, d := range ds {
		switch {
		case out.Allowed:
			out.Remaining += d.Remaining
		case first:
			out.Remaining, out.RetryAfter, first = d.Remaining, d.RetryAfter, false
		default:
			out.Remaining = max(out.Remaining, d.Remaining)
			out.RetryAfter = min(out.RetryAfter, d.RetryAfter)
		}
	}
	return out
}
