package durablecounter

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/edgelimit/edgelimit"
)

// This file is how a Counter decides one request: from the deny cache
// when it proves a denial, else with one store call, on one shard or
// trying a sharded policy's shards in turn; and how it refunds one.

// cached answers o from the deny cache when it proves a denial. held
// reports an entry that does not prove it (the request may fit), expired
// one whose time has passed.
func (c *Counter) cached(o *op) (d edgelimit.Decision, denied, held, expired bool) {
	if c.deny == nil {
		return edgelimit.Decision{}, false, false, false
	}
	st, ok, expired := c.deny.lookup(o.id, o.t)
	if !ok {
		return edgelimit.Decision{}, false, false, expired
	}
	if o.rule.fits(st, o.t, o.cost) {
		return edgelimit.Decision{}, false, true, false
	}
	return o.rule.decision(st, o.t, o.cost, false), true, true, false
}

// denyGen returns the deny cache's generation of o's item, to take before
// the store call whose answer remember will put (see stateCache.since).
func (c *Counter) denyGen(o *op) uint64 {
	if c.deny == nil {
		return 0
	}
	return c.deny.since(o.id)
}

// remember puts a state the store returned into the deny cache, a lower
// bound of the stored state from then on: until a request of one unit
// would fit it (a denial, or an admission that left nothing), else until
// the denied request would fit, or (a batch member that fit, companion of
// a denial) until the batch's denial expires. gen is denyGen's before the
// store call: a state read before this instance's refund or reset of the
// item landed is not a lower bound after it, and is dropped.
func (c *Counter) remember(o *op, r *result, until int64, gen uint64) {
	if c.deny == nil || !r.known {
		return
	}
	st := o.rule.compact(r.st, o.t)
	switch {
	case !o.rule.fits(st, o.t, 1):
		until = o.t + int64(o.rule.decision(st, o.t, 1, false).RetryAfter)
	case !r.ok:
		until = o.t + int64(r.d.RetryAfter)
	}
	// Another instance's reset or grant is not seen here: answer from the
	// entry at most DenyCacheMaxAge.
	until = min(until, o.t+c.denyAge)
	c.deny.putSince(o.id, st, o.t, until, gen)
}

// Allow decides req: it spends req.Units() of the key's quota if they fit
// and reports the quota left. A denial spends nothing. An error means the
// store failed; the engine then applies the policy's on_store_error. An
// allowed decision carries the Receipt that Refund needs to undo it.
func (c *Counter) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if req.Key == "" {
		return edgelimit.Decision{}, ErrNoKey
	}
	v, err := c.variantFor(req)
	if err != nil {
		return edgelimit.Decision{}, err
	}
	t, cost := c.instant(req), req.Units()
	var d edgelimit.Decision
	switch {
	case v.lim.Limit == 0: // denied without asking the store
		d = v.algs[0].decision(state{}, t, cost, false)
	case c.shards == 1:
		d, err = c.decide(ctx, v, req, 0, cost, t)
	default:
		d, err = c.decideSharded(ctx, v, req, cost, t)
	}
	if err == nil && !d.Allowed && !req.Limits.Block { // a blocked key spends no grant either
		d, err = c.fromGrant(ctx, req, cost, t, d, false)
	}
	if err != nil {
		return edgelimit.Decision{}, err
	}
	v.told(c.name, &d)
	return d, nil
}

func (c *Counter) decide(ctx context.Context, v *variant, req edgelimit.Request, shard int, cost, t int64) (edgelimit.Decision, error) {
	o := c.op(v, shard, req.Key, cost, t)
	d, denied, held, expired := c.cached(&o)
	if denied {
		return d, nil
	}
	var fl *flight // this request leads a refresh: its result lands there
	if expired {
		// The key was denied until just now: one request asks the store,
		// the others wait for its answer and look again, so a flood costs
		// one store call per expiry, not one per request in flight. If
		// the store fails that call, the requests that waited for it
		// share its failure (ErrWaited: the engine counts the one call
		// against the store) rather than each asking a failing store.
		f, leader := c.refresh.join(o.id)
		if !leader {
			select {
			case <-f.done:
			case <-ctx.Done():
				return edgelimit.Decision{}, fmt.Errorf("durablecounter: %q: %w: %w", o.id.pk(), edgelimit.ErrWaited, ctx.Err())
			}
			if f.err != nil {
				return edgelimit.Decision{}, fmt.Errorf("durablecounter: %q: %w: %w", o.id.pk(), edgelimit.ErrWaited, f.err)
			}
			o = c.op(v, shard, req.Key, cost, c.later(req, t))
			if d, denied, held, _ = c.cached(&o); denied {
				return d, nil
			}
		} else {
			fl = f
			// A leader that finished between our lookup and our join
			// may have refreshed the entry already.
			if d, denied, held, _ = c.cached(&o); denied {
				c.refresh.land(o.id, fl, nil)
				return d, nil
			}
		}
	}
	gen := c.denyGen(&o)
	r, err := c.store.apply(ctx, o)
	if fl != nil {
		// Landed on return, once the cache has the answer (below), or
		// with the failure the waiters then share.
		defer c.refresh.land(o.id, fl, err)
	}
	if err != nil {
		return edgelimit.Decision{}, err
	}
	if r.ok {
		c.unpeek(o.id)
	}
	switch {
	case !r.ok, r.d.Remaining == 0:
		// A denial, or an admission that left nothing: the next request
		// of this instance is answered from the cache.
		c.remember(&o, &r, 0, gen)
	case held, expired:
		// The entry is out of date now that this instance spent units.
		c.deny.del(o.id)
	}
	d = r.d
	if r.ok {
		d.Receipt = receiptOf(&r, shard)
	}
	return d, nil
}

// decideSharded tries the shards from a random one on until one admits the
// request: a request is denied only when every shard denies it (the deny
// cache answers for shards known to be full), so a sharded policy admits
// exactly its limit, at the price of up to one call per shard for a denial
// the cache does not know yet.
func (c *Counter) decideSharded(ctx context.Context, v *variant, req edgelimit.Request, cost, t int64) (edgelimit.Decision, error) {
	n := c.shards
	start := rand.IntN(n)
	var worst edgelimit.Decision
	for k := range n {
		shard := (start + k) % n
		d, err := c.decide(ctx, v, req, shard, cost, t)
		if err != nil {
			return edgelimit.Decision{}, err
		}
		if d.Allowed {
			if d.Remaining == 0 {
				c.wholePolicy(ctx, v, req.Key, shard, t, &d)
			}
			return d, nil
		}
		if k == 0 {
			worst = d
			continue
		}
		// Denied by every shard: the most any shard has left (what one
		// request could still spend, less than its cost), the soonest any
		// could take the request, the soonest a unit comes back anywhere.
		worst.Remaining = max(worst.Remaining, d.Remaining)
		worst.RetryAfter = min(worst.RetryAfter, d.RetryAfter)
		worst.Reset = min(worst.Reset, d.Reset)
	}
	return worst, nil
}

// wholePolicy makes an admission that left its shard with nothing report
// what the other shards have left, so that a sharded policy's Remaining
// reads 0 only when the whole policy has nothing left: otherwise it is the
// answering shard's, a lower bound of the policy's. It costs one read of
// the other shards (one BatchGetItem), only for such an admission; should
// the read fail, the shard's 0 stands. Reset becomes the soonest instant a
// unit comes back in any shard.
func (c *Counter) wholePolicy(ctx context.Context, v *variant, key string, shard int, t int64, d *edgelimit.Decision) {
	ops := make([]op, 0, c.shards-1)
	for i := range c.shards {
		if i != shard {
			ops = append(ops, c.op(v, i, key, 1, t))
		}
	}
	sts, gens := make([]state, len(ops)), make([]uint64, len(ops))
	for k := range ops {
		gens[k] = c.denyGen(&ops[k])
	}
	if err := c.store.read(ctx, ops, sts); err != nil {
		return
	}
	for k := range ops {
		o := &ops[k]
		od := o.rule.decision(sts[k], t, 1, true)
		d.Remaining += od.Remaining
		d.Reset = min(d.Reset, od.Reset)
		c.remember(o, &result{ok: true, known: true, st: sts[k]}, 0, gens[k])
	}
}

// Refund undoes what the allowed decision d spent for req, by d's Receipt:
// on the same item (the window of d's instant, its shard) and the same
// units (the sliding log's millisecond, gcra's slot of the emission
// schedule), as of the later of d's instant and req's (the Counter's clock,
// or req.At): never a later window's count, never below zero. A refund
// after the spent units stopped mattering (the window ended, they left the
// log, they came back to the bucket) gives nothing back. A decision without
// a Receipt (a denial, a peek, a member of a batch that was not committed,
// a degraded decision) spent nothing, and Refund returns nil. A refund that
// cannot land is retried until ctx ends, then returned as an error.
func (c *Counter) Refund(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	if req.Key == "" {
		return ErrNoKey
	}
	rc := d.Receipt
	if !d.Allowed || rc.At == 0 {
		return nil
	}
	var o op
	switch shard := int(rc.Slot & shardMask); {
	case shard == poolShard && c.pool != nil: // taken from a grant
		o = c.poolOp(req.Key, req.Units(), max(c.instant(req), rc.At))
	case shard >= c.shards:
		return fmt.Errorf("%w: shard %d of policy %q, which has %d", ErrReceipt, shard, c.name, c.shards)
	default:
		v, err := c.variantFor(req)
		if err != nil {
			return err
		}
		if v.lim.Limit == 0 {
			return nil
		}
		alg := v.algs[shard]
		o = newOp(alg, alg.itemFor(req.Key, c.shardID(shard), rc.At), req.Units(), max(c.instant(req), rc.At))
	}
	_, err := c.store.refund(ctx, o, rc)
	// Whether or not it gave anything back (or landed: a failed call may
	// have), what this instance holds of the item from before it is out of
	// date: a cached denial may now fit.
	c.invalidate(o.id)
	return err
}

// invalidate drops what this instance's caches hold of an item, and any
// put of a state read before now, once a write that changes the item
// (this instance's refund, reset, grant) has landed: a cached denial or
// peek from before it must not answer after it.
func (c *Counter) invalidate(id itemID) {
	if c.deny != nil {
		c.deny.invalidate(id)
	}
	c.unpeek(id)
}
