package durablecounter

import (
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// The gcra's item and its conditional updates (the rule is in gcra.go).
// One item per key, gcra#<policy>#<keyhash>, with the TAT in Unix
// nanoseconds. DynamoDB has no max(), so the decision takes one of two
// conditional updates, chosen by this instance's last view of the TAT, and
// the condition checks that choice:
//
//	idle (TAT <= t):  SET tat = :t_plus_cT  if attribute_not_exists(tat) OR tat <= :t
//	busy (TAT > t):   SET tat = tat + :cT   if tat > :t AND tat <= :t_plus_burst_minus_c_T
//
// (plus max_delay in the bound, for a policy that admits for a later turn).
//
// No read precedes either. Concurrent requests on a busy key all take the
// busy update, which commutes, so they never conflict; a wrong choice (a key
// that turned busy since this instance last saw it, or one that went idle)
// fails its condition, ALL_OLD returns the TAT, and the other update is sent
// (two calls). The TAT only ever grows, except by a refund.
//
// The item also keeps a (the instant its latest writer decided at), p (the
// bucket's period: a random number, new whenever a request finds the
// bucket full) and z (the time refunds gave back in the period):
//
//	idle: SET tat = :te_plus_cT, a = :te, p = :new REMOVE z
//	      if (attribute_not_exists(tat) OR tat <= :te) AND (attribute_not_exists(a) OR a <= :te)
//	busy: SET tat = tat + :cT, a = :te  if tat > :te AND tat <= :te_plus_burst_minus_c_T
//
// The idle update's second condition keeps a from going back and a TAT from
// being set behind an instant a request was already decided at.

func (a *gcra) unknown(_, _ int64, allowed bool) edgelimit.Decision {
	// Nothing left: a unit comes back within one interval.
	d := edgelimit.Decision{Allowed: allowed, Reset: time.Duration(max(a.T, 1))}
	if allowed {
		// The turn is unknown: wait the longest it can be away.
		d.Delay = time.Duration(a.delay)
	} else {
		d.RetryAfter = time.Duration(max(a.tau, 1))
	}
	return d
}

func (a *gcra) update(view state, t, cost int64, margin time.Duration, u *condUpdate) {
	if a.limit == 0 || cost > a.burst {
		u.readOnly = true
		return
	}
	te := a.instant(view, t)
	u.Name("#t", "tat")
	u.Name("#a", "a")
	u.Value(":te", te)
	u.at = te
	if view.exists && view.n > te {
		u.Expr = "SET #t = #t + :ct, #a = :te, expires_at = :e"
		u.Cond = "#t > :te AND #t <= :lim"
		u.Value(":ct", cost*a.T)
		u.Value(":lim", te+(a.burst-cost)*a.T+a.delay)
		u.Value(":e", expSec(te+a.tau+a.delay+int64(margin))) // the TAT can be at most te + tau + delay
		// Without a reply the slot's end is known only to be after
		// te + cT, and the period only if the condition pins it.
		u.rc = edgelimit.Receipt{At: te}
		putInt64(u.rc.ID[:8], te+cost*a.T)
		putInt64(u.rc.ID[8:], -1)
		if u.tx {
			u.Name("#p", "p")
			if view.p == 0 {
				u.Cond += " AND attribute_not_exists(#p)"
			} else {
				u.Cond += " AND #p = :p"
				u.Value(":p", view.p)
			}
			u.rc.Slot = view.p << shardBits
		}
	} else {
		tat, p := te+cost*a.T, newPeriod()
		u.Name("#p", "p")
		u.Name("#z", "z")
		u.Expr = "SET #t = :nt, #a = :te, #p = :p, expires_at = :e REMOVE #z"
		u.Cond = "(attribute_not_exists(#t) OR #t <= :te) AND (attribute_not_exists(#a) OR #a <= :te)"
		u.Value(":nt", tat)
		u.Value(":p", p)
		u.Value(":e", expSec(tat+int64(margin)))
		u.rc = a.receipt(state{exists: true, n: tat, p: p}, te, cost)
	}
	u.Return = wire.ReturnAllNew
}

// chargeUpdate moves the TAT on by cost*T whether or not that fits the
// tolerance: the idle form as in update; the busy form with its bound
// raised to where this instance saw the TAT (at least te + tau), so that
// expires_at is never set before the TAT it leaves. A TAT beyond that
// bound fails the condition and the charge is sent again from the TAT the
// failure returned.
func (a *gcra) chargeUpdate(view state, t, cost int64, margin time.Duration, u *condUpdate) {
	te := a.instant(view, t)
	u.Name("#t", "tat")
	u.Name("#a", "a")
	u.Value(":te", te)
	u.at = te
	ct := cost * a.T
	if view.exists && view.n > te {
		tmax := max(view.n, te+a.tau)
		u.Expr = "SET #t = #t + :ct, #a = :te, expires_at = :e"
		u.Cond = "#t > :te AND #t <= :lim"
		u.Value(":ct", ct)
		u.Value(":lim", tmax)
		u.Value(":e", expSec(tmax+ct+int64(margin)))
	} else {
		tat := te + ct
		u.Name("#p", "p")
		u.Name("#z", "z")
		u.Expr = "SET #t = :nt, #a = :te, #p = :p, expires_at = :e REMOVE #z"
		u.Cond = "(attribute_not_exists(#t) OR #t <= :te) AND (attribute_not_exists(#a) OR #a <= :te)"
		u.Value(":nt", tat)
		u.Value(":p", newPeriod())
		u.Value(":e", expSec(tat+int64(margin)))
	}
	u.Return = wire.ReturnAllNew
}

func (a *gcra) decode(item wire.Item, _ int64) (state, error) {
	tat, ok, err := attrInt(item, "tat")
	if err != nil || !ok {
		return state{}, err
	}
	s := state{exists: true, n: tat}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"a", &s.at}, {"p", &s.p}, {"z", &s.r}} {
		if *f.v, _, err = attrInt(item, f.name); err != nil {
			return state{}, err
		}
	}
	return s, nil
}

// maxRefundGuards is how many refunds of a gcra item guard the refunds
// given back since the spend (to give back exactly the slot's part still to
// come) before the next gives back what certainly is, unguarded.
const maxRefundGuards = 4

// refundUpdate moves the TAT back by the part of the spending's slot still
// to come (refundOut). The guard on p fails once the period has ended
// (nothing to give back); the guard on z, only present while it lets the
// refund give back more than te bounds, fails when another refund landed
// since the spend or the last attempt, and the next attempt uses the z the
// failure showed.
func (a *gcra) refundUpdate(rc edgelimit.Receipt, seen *state, attempt int, tr, cost int64, u *condUpdate) bool {
	p, zk := rc.Slot>>shardBits, getInt64(rc.ID[8:])
	if seen != nil && (!seen.exists || seen.p != p) {
		return false
	}
	z := zk
	if seen != nil {
		z = seen.r
	}
	if attempt > maxRefundGuards {
		zk = -1 // what te bounds, unguarded
	}
	guarded := rc
	putInt64(guarded.ID[8:], zk)
	out := a.refundOut(guarded, z, tr, cost)
	if out == 0 {
		return false
	}
	u.Name("#t", "tat")
	u.Name("#p", "p")
	u.Name("#z", "z")
	u.Expr = "SET #t = #t - :out ADD #z :out"
	u.Value(":out", out)
	if p == 0 {
		u.Cond = "attribute_not_exists(#p)"
	} else {
		u.Cond = "#p = :p"
		u.Value(":p", p)
	}
	if zk >= 0 && out > a.refundOut(edgelimit.Receipt{At: rc.At, ID: unknownZ}, z, tr, cost) {
		u.Cond += " AND (attribute_not_exists(#z) OR #z <= :z)"
		u.Value(":z", z)
	}
	return true
}

// unknownZ is a gcra receipt's ID with the refunds before the spend unknown
// (and no slot end beyond te + cT).
var unknownZ = func() (id [16]byte) {
	putInt64(id[8:], -1)
	return id
}()

func (a *gcra) blind(_, _ int64) (state, bool) { return state{}, false }

func (a *gcra) conditions() conditions { return conditions{usesView: true, refundRaces: true} }
