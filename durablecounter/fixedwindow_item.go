package durablecounter

import (
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// The fixed window's item and its one conditional update (the rule is in
// fixedwindow.go):
//
//	fw#<policy>#<keyhash>#<window start>   n (units spent), g (incarnation)
//
// The window start is in seconds (milliseconds for a window that is not
// whole seconds); a calendar period's is its start instant in seconds
// (period.go). A window other than the policy's (a tier's, an
// override's) counts in items of its own, fw#<policy>/<window ms>#...: a
// count means nothing under another window. An item is only ever written
// during its own window and expires at its end (plus the margin).
//
// The condition is exactly the rule's fits (n <= limit - cost), so a failed
// condition is a denial, and with cost 1 it proves that nothing is left
// without the old item (blind).

func (f *fixedWindow) unknown(t, _ int64, allowed bool) edgelimit.Decision {
	// Remaining 0: an allowed batch whose counts could not be read reports
	// none, conservatively; so does a denial whose count is unknown.
	d := edgelimit.Decision{Allowed: allowed, Reset: time.Duration(f.end(t) - t)}
	f.period(&d, t)
	if !allowed {
		d.RetryAfter = d.Reset
	}
	return d
}

// Attribute names and expressions of the fixed window's one write.
const (
	attrCount = "n"
	// exprAdd spends :d and keeps the item until :e; a new item gets its
	// incarnation.
	exprAdd = "ADD n :d SET expires_at = :e, #g = if_not_exists(#g, :g)"
	// condFits admits while the count leaves room for :d (:m = limit - d).
	condFits = "attribute_not_exists(n) OR n <= :m"
	// condNever is used when :d exceeds the limit (:m < 0): it fails whether
	// or not the item exists, so the reply still carries the count.
	condNever = "n <= :m"
	// exprRefund gives back :d (as :r = -d) only if that leaves n >= 0.
	exprRefund = "ADD n :r"
	condRefund = "n >= :d"
)

func (f *fixedWindow) update(_ state, t, cost int64, margin time.Duration, u *condUpdate) {
	u.Expr = exprAdd
	u.Cond = condFits
	if cost > f.limit {
		u.Cond = condNever
	}
	u.Value(":d", cost)
	u.Value(":m", f.limit-cost)
	u.Value(":e", expSec(f.end(t)+int64(margin)))
	u.Name("#g", "g")
	u.Value(":g", newIncarnation())
	u.Return = wire.ReturnAllNew // n after the write (Remaining = limit - n), and g
	u.at, u.rc = t, f.receipt(state{}, t, cost)
}

// chargeUpdate spends without a condition: ADD commutes with every other write.
func (f *fixedWindow) chargeUpdate(_ state, t, cost int64, margin time.Duration, u *condUpdate) {
	u.Expr = exprAdd
	u.Value(":d", cost)
	u.Value(":e", expSec(f.end(t)+int64(margin)))
	u.Name("#g", "g")
	u.Value(":g", newIncarnation())
	u.Return = wire.ReturnAllNew
	u.at = t
}

func (f *fixedWindow) decode(item wire.Item, now int64) (state, error) {
	if item == nil || item.Len() == 0 {
		return state{}, nil
	}
	if e, ok, _ := attrInt(item, "expires_at"); ok && e <= floorDiv(now, int64(time.Second)) {
		return state{}, nil // expired: TTL deletion is lazy
	}
	n, ok, err := attrInt(item, attrCount)
	if err != nil || !ok {
		return state{}, err
	}
	g, _, err := attrInt(item, "g")
	if err != nil {
		return state{}, err
	}
	return state{exists: true, n: n, w: g}, nil
}

// refundUpdate gives back to the item of rc's window (the caller names it by
// rc.At), never to a later window: a refund after the window ended has
// nothing left to do. A failed guard means the item holds less than the
// cost (it expired): nothing to give back.
func (f *fixedWindow) refundUpdate(rc edgelimit.Receipt, seen *state, _ int, tr, cost int64, u *condUpdate) bool {
	if seen != nil || tr >= f.end(rc.At) {
		return false
	}
	u.Expr = exprRefund
	u.Cond = condRefund
	if g := getInt64(rc.ID[:8]); g != 0 {
		u.Cond += " AND #g = :g"
		u.Name("#g", "g")
		u.Value(":g", g)
	}
	u.Value(":r", -cost)
	u.Value(":d", cost)
	return true
}

func (f *fixedWindow) blind(_, cost int64) (state, bool) {
	if cost != 1 {
		return state{}, false
	}
	// With cost 1 a denial means nothing is left: the count is at least
	// the limit.
	return state{exists: true, n: f.limit}, true
}

func (f *fixedWindow) conditions() conditions { return conditions{exact: true} }
