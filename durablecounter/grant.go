package durablecounter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// Grants (Counter.Grant) are units an operator gives one key beyond its
// quota. They are kept apart from the quota, in one item per policy and
// key, whatever the algorithm, its window or its shards:
//
//	grant#<policy>#<keyhash>   u (units left), un (the grant's end, Unix ms), expires_at
//	grant#<policy>#            un: the latest end of any grant of the policy (the marker)
//
// Grants are for the policies an operator manages at run time, those with
// overrides: true (Policy.Overrides): a policy without takes none, and its
// decisions cost nothing for them. A request the quota denies is admitted
// from the key's grant if the grant
// has its cost left, with one more conditional update (ADD u -cost if
// u >= cost and un > now): the quota is spent first, then the grant, and
// never more than either holds, however many instances take from them at
// once. The marker keeps keys without grants at one call for a denial: an
// instance reads it at most once per DenyCacheMaxAge (1 s), only on the way
// to a denial, and asks a key's grant only while the marker says that some
// grant of the policy may be in force.

// poolShard is the shard a Receipt names for units taken from a grant.
const poolShard = shardMask

// grantPool is the algorithm of a key's grant item (and, with an empty
// key, of the policy's marker): a number of units that a request takes
// while they last and the grant has not ended. Its state: n, the units
// left; at, the grant's end (Unix nanoseconds).
type grantPool struct {
	prefix string
}

func newGrantPool(policy string) *grantPool { return &grantPool{prefix: "grant#" + policy + "#"} }

// poolOp is the op that takes cost units from key's grant at t.
func (c *Counter) poolOp(key string, cost, t int64) op {
	return op{alg: c.pool, id: c.pool.itemFor(key, noShard, t), cost: cost, t: t}
}

// markerOp is the op that reads the policy's grant marker.
func (c *Counter) markerOp(t int64) op {
	return op{alg: c.pool, id: c.pool.itemFor("", noShard, t), cost: 1, t: t}
}

func (g *grantPool) itemFor(key string, _ int32, _ int64) itemID {
	return itemID{prefix: g.prefix, key: key, slot: noSlot, shard: noShard}
}

func (g *grantPool) live(s *state, t int64) bool { return s.exists && t < s.at }

// capacity: a grant has no limit of its own; a request larger than what
// is left is denied by fits.
func (g *grantPool) capacity() int64 { return maxCount }

func (g *grantPool) instant(_ state, t int64) int64 { return t }

func (g *grantPool) fits(s state, t, cost int64) bool { return g.live(&s, t) && s.n >= cost }

func (g *grantPool) commit(s state, _, cost int64) state {
	s.n -= cost
	return s
}

// receipt names the grant the units came from by its end, so that a
// refund after the grant was replaced gives nothing to the new one.
func (g *grantPool) receipt(s state, te, _ int64) edgelimit.Receipt {
	rc := edgelimit.Receipt{At: te, Slot: poolShard}
	putInt64(rc.ID[:8], s.at)
	return rc
}

func (g *grantPool) giveBack(s state, rc edgelimit.Receipt, tr, cost int64) (state, bool) {
	if !g.live(&s, tr) || s.at != getInt64(rc.ID[:8]) {
		return s, false
	}
	s.n += cost
	return s, true
}

// decision reports the grant's units left. A denial by a grant is
// answered again only after DenyCacheMaxAge (a new grant can come at any
// time): its RetryAfter is long, and the deny cache caps it.
func (g *grantPool) decision(s state, t, cost int64, allowed bool) edgelimit.Decision {
	d := edgelimit.Decision{Allowed: allowed}
	if g.live(&s, t) {
		d.Remaining = max(0, s.n)
		d.Reset = time.Duration(s.at - t)
	}
	if !allowed {
		d.Remaining = min(d.Remaining, cost-1)
		d.RetryAfter = max(d.Reset, time.Hour)
	}
	return d
}

func (g *grantPool) unknown(_, _ int64, allowed bool) edgelimit.Decision {
	d := edgelimit.Decision{Allowed: allowed}
	if !allowed {
		d.RetryAfter = time.Hour
	}
	return d
}

func (g *grantPool) expiry(s state, t int64) int64 {
	if !s.exists {
		return t
	}
	return s.at
}

func (g *grantPool) compact(s state, _ int64) state { return state{exists: s.exists, n: s.n, at: s.at} }

func (g *grantPool) update(_ state, t, cost int64, _ time.Duration, u *condUpdate) {
	u.Name("#u", "u")
	u.Name("#un", "un")
	u.Expr = "ADD #u :nc"
	u.Cond = "#u >= :c AND #un > :t"
	u.Value(":nc", -cost)
	u.Value(":c", cost)
	u.Value(":t", floorDiv(t, int64(time.Millisecond)))
	u.Return = wire.ReturnAllNew
	u.at = t
	u.rc = edgelimit.Receipt{At: t, Slot: poolShard} // the grant's end only with the reply
}

func (g *grantPool) decode(item wire.Item, now int64) (state, error) {
	un, ok, err := attrInt(item, "un")
	if err != nil || !ok {
		return state{}, err
	}
	s := state{exists: true, at: un * int64(time.Millisecond)}
	if s.at <= now {
		return state{}, nil // ended: TTL deletion is lazy
	}
	if s.n, _, err = attrInt(item, "u"); err != nil {
		return state{}, err
	}
	return s, nil
}

func (g *grantPool) refundUpdate(rc edgelimit.Receipt, seen *state, _ int, tr, cost int64, u *condUpdate) bool {
	end := getInt64(rc.ID[:8])
	if seen != nil || end <= tr {
		return false
	}
	u.Name("#u", "u")
	u.Name("#un", "un")
	u.Expr = "ADD #u :c"
	u.Value(":c", cost)
	if end != 0 {
		u.Cond = "#un = :un"
		u.Value(":un", floorDiv(end, int64(time.Millisecond)))
	} else {
		u.Cond = "#un > :t"
		u.Value(":t", floorDiv(tr, int64(time.Millisecond)))
	}
	return true
}

func (g *grantPool) refundRetries() bool { return false }

// blind: a failed take of one unit proves that the grant has none (or has
// ended, or there is none); of more, it proves nothing about fewer.
func (g *grantPool) blind(_, cost int64) (state, bool) { return state{}, cost == 1 }

func (g *grantPool) exact() bool { return true }

func (g *grantPool) needsView() bool { return false }

func (g *grantPool) charge(state, int64, int64, time.Duration, *condUpdate) {}

func (g *grantPool) windowEnd(t int64) int64 { return t }

func (g *grantPool) resetItems(string, int32, int64) []itemID { return nil }

// add returns s with units more granted until end, as of t: a grant in
// force keeps its units and lasts until the later of the two ends; an
// ended or absent one is replaced.
func (g *grantPool) add(s state, units, end, t int64) state {
	if !g.live(&s, t) {
		return state{exists: true, n: units, at: end}
	}
	s.n += units
	s.at = max(s.at, end)
	return s
}

// grantUpdates are the conditional updates that grant units until end
// (Unix nanoseconds, a whole millisecond) as of t, one for each state the
// item can be in, without a read: exactly one condition holds, and a store
// tries them in turn until one does. For the marker (units 0) only the end
// is raised.
func (g *grantPool) grantUpdates(units, end, t int64, margin time.Duration) []wire.Update {
	endMs, nowMs := end/int64(time.Millisecond), floorDiv(t, int64(time.Millisecond))
	exp := expSec(end + int64(margin))
	mk := func(expr, cond string, values ...wire.Value) wire.Update {
		u := wire.Update{Expr: expr, Cond: cond, SkipOldRead: true, Values: values}
		u.Name("#un", "un")
		if units > 0 {
			u.Name("#u", "u")
		}
		return u
	}
	if units == 0 {
		return []wire.Update{mk("SET #un = :end, expires_at = :e", "attribute_not_exists(#un) OR #un < :end",
			wire.Value{Placeholder: ":end", N: endMs}, wire.Value{Placeholder: ":e", N: exp})}
	}
	gv := wire.Value{Placeholder: ":g", N: units}
	return []wire.Update{
		// absent or ended: replace
		mk("SET #u = :g, #un = :end, expires_at = :e", "attribute_not_exists(#un) OR #un <= :now",
			gv, wire.Value{Placeholder: ":end", N: endMs}, wire.Value{Placeholder: ":e", N: exp}, wire.Value{Placeholder: ":now", N: nowMs}),
		// in force, ending no later: add, and extend
		mk("ADD #u :g SET #un = :end, expires_at = :e", "#un > :now AND #un <= :end",
			gv, wire.Value{Placeholder: ":end", N: endMs}, wire.Value{Placeholder: ":e", N: exp}, wire.Value{Placeholder: ":now", N: nowMs}),
		// in force, ending later: add
		mk("ADD #u :g", "#un > :end", gv, wire.Value{Placeholder: ":end", N: endMs}),
	}
}

// grantMarker is what this instance knows of the policy's marker: the
// latest end of any grant, as of when it last read it.
type grantMarker struct {
	mu     sync.Mutex
	read   bool
	readAt int64 // decision-clock instant of the read
	end    int64 // Unix nanoseconds; 0: no grant
	flight chan struct{}
}

// grantsMayExist reports whether some grant of the policy may be in force
// at t: from what this instance read of the marker less than
// DenyCacheMaxAge ago, else from a read of it (one per interval, however
// many requests wait for it).
func (c *Counter) grantsMayExist(ctx context.Context, t int64) (bool, error) {
	if c.pool == nil {
		return false, nil // a policy without overrides takes no grants
	}
	m := &c.marker
	for {
		m.mu.Lock()
		if m.read && t >= m.readAt && t-m.readAt < c.denyAge {
			may := t < m.end
			m.mu.Unlock()
			return may, nil
		}
		if ch := m.flight; ch != nil {
			m.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return false, fmt.Errorf("durablecounter: waiting for the grant marker of %q: %w", c.name, ctx.Err())
			}
		}
		ch := make(chan struct{})
		m.flight = ch
		m.mu.Unlock()
		st, err := c.store.get(ctx, c.markerOp(t))
		m.mu.Lock()
		m.flight = nil
		if err == nil {
			m.read, m.readAt, m.end = true, t, 0
			if st.exists {
				m.end = st.at
			}
		}
		m.mu.Unlock()
		close(ch)
		if err != nil {
			return false, err
		}
	}
}

// grantsKnownAbsent reports, without a store call, that no grant of the
// policy can be in force at t (for answering a batch from the caches).
func (c *Counter) grantsKnownAbsent(t int64) bool {
	if c.pool == nil {
		return true
	}
	m := &c.marker
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.read && t >= m.readAt && t-m.readAt < c.denyAge && t >= m.end
}

// raised records a grant this instance made, until end.
func (m *grantMarker) raised(end int64) {
	m.mu.Lock()
	m.end = max(m.end, end)
	m.mu.Unlock()
}

// fromGrant is a request the quota denied (d), asked again of the key's
// grant: it is admitted if the grant has its cost left, and the grant
// pays all of it. The decision then says what the grant has left (with
// what the quota has), and Reason "grant".
func (c *Counter) fromGrant(ctx context.Context, req edgelimit.Request, cost, t int64, d edgelimit.Decision, peek bool) (edgelimit.Decision, error) {
	// Should the marker or the grant be out of reach, the quota's denial
	// stands: a grant is never a reason to fail a request.
	if may, err := c.grantsMayExist(ctx, t); err != nil || !may {
		return d, nil
	}
	o := c.poolOp(req.Key, cost, t)
	if c.deny != nil {
		if st, ok := c.deny.get(o.id, t); ok && !o.alg.fits(st, t, cost) {
			return d, nil
		}
	}
	var r result
	gen := c.denyGen(&o)
	if peek {
		st, err := c.store.get(ctx, o)
		if err != nil {
			return d, nil
		}
		fits := o.alg.fits(st, t, cost)
		r = result{ok: fits, known: true, st: o.alg.compact(st, t), d: o.alg.decision(st, t, cost, fits)}
	} else {
		var err error
		if r, err = c.store.apply(ctx, o); err != nil {
			return d, nil
		}
	}
	switch {
	case !r.ok || r.d.Remaining == 0:
		c.remember(&o, &r, 0, gen)
	case c.deny != nil:
		c.deny.del(o.id)
	}
	if !r.ok {
		return d, nil
	}
	// What the quota has left (less than the cost) and the grant: told()
	// keeps it within the quota the client is told.
	d = granted(d, r.d)
	if !peek {
		d.Receipt = r.rc
	}
	return d, nil
}

// Grant gives req's key units beyond its quota, until the instant until,
// or when until is zero until the end of the current window of the limits
// in force (req.Limits: a fixed or sliding window's end; one window from
// now for a sliding log and gcra). The units are spent once the quota is
// (see the package documentation, Grants); a grant made while another is
// in force adds its units to it, and they last until the later end. Reset
// does not take them back. The instance that grants honours it at once;
// others within DenyCacheMaxAge (they read the policy's grant marker
// again, and their deny-cache entries expire).
func (c *Counter) Grant(ctx context.Context, req edgelimit.Request, units int64, until time.Time) error {
	if req.Key == "" {
		return ErrNoKey
	}
	if c.pool == nil {
		return fmt.Errorf("%w: policy %q takes no grants; a policy an operator manages at run time has `overrides: true` (Policy.Overrides)", ErrGrant, c.name)
	}
	if units <= 0 || units > maxCount {
		return fmt.Errorf("%w: %d units", ErrGrant, units)
	}
	v, err := c.variantFor(req)
	if err != nil {
		return err
	}
	t := c.instant(req)
	end := v.algs[0].windowEnd(t)
	if !until.IsZero() {
		end = until.UnixNano()
	}
	// Stored to the millisecond, rounded up, on every store alike.
	end = (end + int64(time.Millisecond) - 1) / int64(time.Millisecond) * int64(time.Millisecond)
	if end <= t {
		return fmt.Errorf("%w: it would end at %s, which has passed", ErrGrant, time.Unix(0, end).UTC().Format(time.RFC3339Nano))
	}
	// The marker first: should the grant then fail, the marker only costs
	// other instances a look at a key's empty grant.
	if err := c.store.grant(ctx, c.markerOp(t), 0, end); err != nil {
		return err
	}
	o := c.poolOp(req.Key, units, t)
	if err := c.store.grant(ctx, o, units, end); err != nil {
		return err
	}
	c.marker.raised(end)
	c.invalidate(o.id)
	return nil
}
