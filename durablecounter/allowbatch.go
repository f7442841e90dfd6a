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
	}
	// cur is each member's shard, tried how many shards it has tried.
	cur, tried := make([]int, n), make([]int, n)
	for i, m := range members {
		if len(m.algs) > 1 {
			cur[i] = rand.IntN(len(m.algs))
		}
	}
	ops := make([]op, n)
	res := make([]result, n)
	for {
		for i, m := range members {
			key, cost := items[i].Request.Key, items[i].Request.Units()
			ops[i] = m.op(cur[i], key, cost, t)
			// A sharded member skips the shards its deny cache knows are full.
			for len(m.algs) > 1 && tried[i] < len(m.algs)-1 {
				if _, full, _, _ := m.cached(&ops[i]); !full {
					break
				}
				cur[i], tried[i] = (cur[i]+1)%len(m.algs), tried[i]+1
				ops[i] = m.op(cur[i], key, cost, t)
			}
		}
		if out, ok := fromCaches(members, ops); ok {
			return out, nil
		}
		committed, err := c.store.applyAll(ctx, ops, res)
		if err != nil {
			return nil, err
		}
		out := make([]edgelimit.Decision, n)
		denied, retry := false, true
		until := t
		for i, m := range members {
			out[i] = res[i].d
			m.told(&out[i])
			if !res[i].ok {
				denied = true
				until = max(until, t+int64(res[i].d.RetryAfter))
				// A sharded member may fit in a shard it has not tried.
				retry = retry && len(m.algs) > 1 && tried[i] < len(m.algs)-1
			}
		}
		if committed {
			for i, m := range members {
				m.unpeek(ops[i].id)
				out[i].Receipt = receiptOf(&res[i], cur[i])
				switch {
				case m.deny == nil:
				case res[i].d.Remaining == 0:
					m.remember(&ops[i], &res[i], 0)
				default:
					m.deny.del(ops[i].id)
				}
				if len(m.algs) > 1 && out[i].Remaining == 0 {
					m.wholePolicy(ctx, items[i].Request.Key, cur[i], t, &out[i])
				}
			}
			return out, nil
		}
		if !denied {
			return nil, fmt.Errorf("durablecounter: batch of %d was not committed, yet no member was denied", n)
		}
		for i, m := range members {
			m.remember(&ops[i], &res[i], until)
		}
		if !retry {
			return out, nil
		}
		for i, m := range members {
			if !res[i].ok {
				cur[i], tried[i] = (cur[i]+1)%len(m.algs), tried[i]+1
			}
		}
	}
}

// fromCaches answers a batch from its members' deny caches when one of
// them proves a denial and every member's state is cached: no store call.
func fromCaches(members []*Counter, ops []op) ([]edgelimit.Decision, bool) {
	denied := false
	sts := make([]state, len(ops))
	for i, m := range members {
		o := &ops[i]
		if m.limit == 0 {
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
		if !o.alg.fits(st, o.t, o.cost) {
			denied = true
		}
	}
	if !denied {
		return nil, false
	}
	out := make([]edgelimit.Decision, len(ops))
	for i, m := range members {
		o := &ops[i]
		out[i] = o.alg.decision(sts[i], o.t, o.cost, m.limit > 0 && o.alg.fits(sts[i], o.t, o.cost))
		m.told(&out[i])
	}
	return out, true
}
