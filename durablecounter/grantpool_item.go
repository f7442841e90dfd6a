package durablecounter

import (
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// The grant pool's item and its conditional updates (the rule is in
// grantpool.go): grant#<policy>#<keyhash> holds u (units left) and un (the
// grant's end, Unix ms); the marker grant#<policy># only un. A take is
// exact: ADD u -cost if u >= cost and un > now.

func (g *grantPool) unknown(_, _ int64, allowed bool) edgelimit.Decision {
	d := edgelimit.Decision{Allowed: allowed}
	if !allowed {
		d.RetryAfter = time.Hour
	}
	return d
}

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

// blind: a failed take of one unit proves that the grant has none (or has
// ended, or there is none); of more, it proves nothing about fewer.
func (g *grantPool) blind(_, cost int64) (state, bool) { return state{}, cost == 1 }

func (g *grantPool) chargeUpdate(state, int64, int64, time.Duration, *condUpdate) {}

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

// conditions: a take is exact (its condition is fits).
func (g *grantPool) conditions() conditions { return conditions{exact: true} }
