package durablecounter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/edgelimit/edgelimit"
)

// BatchKey identifies the Counter's Store: Counters with equal keys can be
// decided together by AllowBatch.
func (c *Counter) BatchKey() string { return c.store.batchKey() }

// batchInstant returns when a batch is decided: by c's clock, else at the
// first request's At (the engine gives every policy of a request the same
// one), else now.
func (c *Counter) batchInstant(items []edgelimit.BatchItem) int64 {
	return c.instant(items[0].Request)
}

// AllowBatch decides several requests, each against its own Counter, all or
// nothing: either every decision is allowed and every request spent its
// units, or nothing was spent; then every member whose quota was exceeded
// is denied and the others are reported allowed with their quota without
// this request (and without a Receipt: they spent nothing). Every member
// must be a *Counter on c's Store, each policy at most once. The batch is
// decided at one instant: c's clock, else the first request's At, else now.
//
// On a Memory store the batch is decided under the members' shard locks; on
// a dynamostore.Store with one TransactWriteItems, or, on a server without
// transactions, as documented at dynamostore.TransactionMode. When the members' deny
// caches prove that the batch is denied and know every member's state, the
// batch is answered without a store call.
func (c *Counter) AllowBatch(ctx context.Context, items []edgelimit.BatchItem) ([]edgelimit.Decision, error) {
	if len(items) == 0 {
		return nil, nil
	}
	t := c.batchInstant(items)
	n := len(items)
	members := make([]*Counter, n)
	vs := make([]*variant, n)
	for i, it := range items {
		m, ok := it.Limiter.(*Counter)
		if !ok || m == nil {
			return nil, fmt.Errorf("%w: member %d is a %T, not a *durablecounter.Counter", ErrBatch, i, it.Limiter)
		}
		if m.store != c.store {
			return nil, fmt.Errorf("%w: policy %q is on another store", ErrBatch, m.name)
		}
		if slices.ContainsFunc(members[:i], func(o *Counter) bool { return o.name == m.name }) {
			return nil, fmt.Errorf("%w: policy %q appears twice", ErrBatch, m.name)
		}
		if it.Request.Key == "" {
			return nil, fmt.Errorf("policy %q: %w", m.name, ErrNoKey)
		}
		members[i] = m
		v, err := m.variantFor(it.Request)
		if err != nil {
			return nil, err
		}
		vs[i] = v
	}
	// cur is each member's shard, tried how many shards it has tried;
	// pooled, that its grant is asked instead (every shard denied it).
	cur, tried, pooled := make([]int, n), make([]int, n), make([]bool, n)
	// quota is a pooled member's denial by its quota, which it reports
	// unless its grant admits it.
	quota := make([]edgelimit.Decision, n)
	for i, m := range members {
		if m.shards > 1 {
			cur[i] = rand.IntN(m.shards)
		}
	}
	ops := make([]op, n)
	res := make([]result, n)
	for {
		for i, m := range members {
			key, cost := items[i].Request.Key, items[i].Request.Units()
			if pooled[i] {
				ops[i] = m.poolOp(key, cost, t)
				continue
			}
			ops[i] = m.op(vs[i], cur[i], key, cost, t)
			// A sharded member skips the shards its deny cache knows are full.
			for m.shards > 1 && tried[i] < m.shards-1 {
				if _, full, _, _ := m.cached(&ops[i]); !full {
					break
				}
				cur[i], tried[i] = (cur[i]+1)%m.shards, tried[i]+1
				ops[i] = m.op(vs[i], cur[i], key, cost, t)
			}
		}
		if out, ok := fromCaches(members, vs, ops, pooled); ok {
			return out, nil
		}
		gens := make([]uint64, n)
		for i, m := range members {
			gens[i] = m.denyGen(&ops[i])
		}
		committed, err := c.store.applyAll(ctx, ops, res)
		if err != nil {
			return nil, err
		}
		out := make([]edgelimit.Decision, n)
		denied := false
		until := t
		for i := range members {
			out[i] = res[i].d
			if pooled[i] {
				out[i] = quota[i]
				if res[i].ok {
					out[i] = granted(quota[i], res[i].d)
				}
			}
			if !res[i].ok {
				denied = true
				if !pooled[i] {
					until = max(until, t+int64(res[i].d.RetryAfter))
				}
			}
		}
		if committed {
			for i, m := range members {
				m.unpeek(ops[i].id)
				if pooled[i] {
					out[i].Receipt = res[i].rc
				} else {
					out[i].Receipt = receiptOf(&res[i], cur[i])
				}
				switch {
				case m.deny == nil:
				case res[i].d.Remaining == 0:
					m.remember(&ops[i], &res[i], 0, gens[i])
				default:
					m.deny.del(ops[i].id)
				}
				if m.shards > 1 && !pooled[i] && out[i].Remaining == 0 {
					m.wholePolicy(ctx, vs[i], items[i].Request.Key, cur[i], t, &out[i])
				}
				vs[i].told(m.name, &out[i])
			}
			return out, nil
		}
		if !denied {
			return nil, fmt.Errorf("durablecounter: batch of %d was not committed, yet no member was denied", n)
		}
		for i, m := range members {
			m.remember(&ops[i], &res[i], until, gens[i])
		}
		// Try again if every denied member has somewhere else to go: a
		// shard it has not tried, or its grant.
		retry := true
		for i, m := range members {
			if res[i].ok {
				continue
			}
			switch {
			case pooled[i], items[i].Request.Limits.Block: // a blocked key spends no grant either
				retry = false
			case m.shards > 1 && tried[i] < m.shards-1:
			default:
				may, err := m.grantsMayExist(ctx, t)
				if err != nil {
					return nil, err
				}
				retry = retry && may
			}
		}
		if !retry {
			for i, m := range members {
				vs[i].told(m.name, &out[i])
			}
			return out, nil
		}
		for i, m := range members {
			if res[i].ok {
				continue
			}
			if m.shards > 1 && tried[i] < m.shards-1 {
				cur[i], tried[i] = (cur[i]+1)%m.shards, tried[i]+1
			} else {
				pooled[i], quota[i] = true, out[i]
			}
		}
	}
}

// fromCaches answers a batch from its members' deny caches when one of
// them proves a denial and every member's state is cached: no store call.
// A member denied by its quota's cached state proves the denial only if no
// grant of its policy can be in force (as this instance last read).
func fromCaches(members []*Counter, vs []*variant, ops []op, pooled []bool) ([]edgelimit.Decision, bool) {
	denied := false
	sts := make([]state, len(ops))
	for i, m := range members {
		o := &ops[i]
		if vs[i].lim.Limit == 0 && !pooled[i] {
			if !m.grantsKnownAbsent(o.t) {
				return nil, false
			}
			denied = true
			continue
		}
		if m.deny == nil {
			return nil, false
		}
		st, ok := m.deny.get(o.id, o.t)
		if !ok {
			return nil, false
		}
		sts[i] = st
		if !o.rule.fits(st, o.t, o.cost) {
			if !pooled[i] && !m.grantsKnownAbsent(o.t) {
				return nil, false
			}
			denied = true
		}
	}
	if !denied {
		return nil, false
	}
	out := make([]edgelimit.Decision, len(ops))
	for i, m := range members {
		o := &ops[i]
		zero := vs[i].lim.Limit == 0 && !pooled[i]
		out[i] = o.rule.decision(sts[i], o.t, o.cost, !zero && o.rule.fits(sts[i], o.t, o.cost))
		vs[i].told(m.name, &out[i])
	}
	return out, true
}

// granted is the decision of a request its quota denied (q) and its grant
// admits (g, the grant's state after it, or without it): allowed, with
// what both have left, Reason "grant".
func granted(q, g edgelimit.Decision) edgelimit.Decision {
	q.Allowed, q.RetryAfter, q.Reason = true, 0, "grant"
	q.Remaining = max(0, q.Remaining) + g.Remaining
	return q
}
