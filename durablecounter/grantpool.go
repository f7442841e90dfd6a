package durablecounter

import (
	"time"

	"github.com/edgelimit/edgelimit"
)

// poolShard is the shard a Receipt names for units taken from a grant.
const poolShard = shardMask

// grantPool is the algorithm of a key's grant item (and, with an empty
// key, of the policy's marker; see grant.go): a number of units that a
// request takes while they last and the grant has not ended. Its state: n,
// the units left; at, the grant's end (Unix nanoseconds). Its item and
// conditional updates are in grantpool_item.go.
type grantPool struct {
	prefix string
	pid    uint32
}

func newGrantPool(policy string) *grantPool {
	prefix := "grant#" + policy + "#"
	return &grantPool{prefix: prefix, pid: prefixID(prefix)}
}

func (g *grantPool) itemFor(key string, _ int32, _ int64) itemID {
	return itemID{prefix: g.prefix, pid: g.pid, key: key, slot: noSlot, shard: noShard}
}

func (g *grantPool) live(s *state, t int64) bool { return s.exists && t < s.at }

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

func (g *grantPool) expiry(s state, t int64) int64 {
	if !s.exists {
		return t
	}
	return s.at
}

func (g *grantPool) compact(s state, _ int64) state { return state{exists: s.exists, n: s.n, at: s.at} }

func (g *grantPool) windowEnd(t int64) int64 { return t }

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
