package durablecounter

import (
	"time"

	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"

	"github.com/edgelimit/edgelimit"
)

// fixedWindow counts cost units per key in windows of a fixed length
// aligned to the Unix epoch: [k*window, (k+1)*window). Each window has its
// own item, fw#<policy>#<keyhash>#<window start>, so a new window starts
// from zero without any reset write, and an item is only ever written
// during its own window.
//
// A client can spend its whole limit at the end of one window and again at
// the start of the next: up to twice the limit within a short time around a
// boundary. That is the algorithm, not a bug; sliding-window avoids it.
type fixedWindow struct {
	prefix string
	limit  int64
	window int64 // nanoseconds
	// slotUnit converts a window start in nanoseconds into the number in the
	// partition key: seconds when the window is whole seconds, else
	// milliseconds (New accepts only whole-millisecond windows).
	slotUnit int64
}

func newFixedWindow(p params) algorithm {
	unit := int64(time.Second)
	if p.window%time.Second != 0 {
		unit = int64(time.Millisecond)
	}
	return &fixedWindow{prefix: "fw#" + p.name + "#", limit: p.limit, window: int64(p.window), slotUnit: unit}
}

// start returns the start of the window containing t.
func (f *fixedWindow) start(t int64) int64 { return floorDiv(t, f.window) * f.window }

func (f *fixedWindow) itemFor(key string, shard int32, t int64) itemID {
	return itemID{prefix: f.prefix, key: key, slot: f.start(t) / f.slotUnit, shard: shard}
}

func (f *fixedWindow) capacity() int64 { return f.limit }

func (f *fixedWindow) fits(s state, _, cost int64) bool {
	return cost <= f.limit && s.n <= f.limit-cost
}

func (f *fixedWindow) commit(s state, _, cost int64) state {
	s.exists = true
	s.n += cost
	return s
}

func (f *fixedWindow) instant(_ state, t int64) int64 { return t }

func (f *fixedWindow) receipt(_ state, te, _ int64) edgelimit.Receipt {
	return edgelimit.Receipt{At: te}
}

// giveBack undoes a spending in the item of rc's window (the caller found
// it by rc.At); once that window has ended, nothing it held matters.
func (f *fixedWindow) giveBack(s state, rc edgelimit.Receipt, tr, cost int64) (state, bool) {
	if !s.exists || s.n < cost || tr >= f.start(rc.At)+f.window {
		return s, false
	}
	s.n -= cost
	return s, true
}

func (f *fixedWindow) decision(s state, t, cost int64, allowed bool) edgelimit.Decision {
	d := edgelimit.Decision{
		Allowed: allowed,
		// The effective window: until the window ends, nothing comes back.
		Reset:     time.Duration(f.start(t) + f.window - t),
		Remaining: max(0, f.limit-s.n),
	}
	if !allowed {
		// The count that denied left less than the cost. A read after the
		// denial may see a later refund: clamp, so the reply stays
		// consistent with the denial. Nothing frees up before the window
		// ends.
		d.Remaining = min(d.Remaining, cost-1)
		d.RetryAfter = d.Reset
	}
	return d
}

func (f *fixedWindow) unknown(t, _ int64, allowed bool) edgelimit.Decision {
	// Remaining 0: an allowed batch whose counts could not be read reports
	// none, conservatively; so does a denial whose count is unknown.
	d := edgelimit.Decision{Allowed: allowed, Reset: time.Duration(f.start(t) + f.window - t)}
	if !allowed {
		d.RetryAfter = d.Reset
	}
	return d
}

func (f *fixedWindow) expiry(_ state, t int64) int64 { return f.start(t) + f.window }

func (f *fixedWindow) compact(s state, _ int64) state { return state{exists: s.exists, n: s.n} }

// Attribute names and expressions of the fixed window's one write.
const (
	attrCount = "n"
	// exprAdd spends :d and keeps the item until :e.
	exprAdd = "ADD n :d SET expires_at = :e"
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
	u.Value(":e", expSec(f.start(t)+f.window+int64(margin)))
	u.Return = wire.ReturnUpdatedNew // n after the write: Remaining = limit - n
	u.at, u.rc = t, f.receipt(state{}, t, cost)
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
	return state{exists: true, n: n}, nil
}

// refundUpdate gives back to the item of rc's window (the caller names it by
// rc.At), never to a later window: a refund after the window ended has
// nothing left to do. A failed guard means the item holds less than the
// cost (it expired): nothing to give back.
func (f *fixedWindow) refundUpdate(rc edgelimit.Receipt, seen *state, _ int, tr, cost int64, u *condUpdate) bool {
	if seen != nil || tr >= f.start(rc.At)+f.window {
		return false
	}
	u.Expr = exprRefund
	u.Cond = condRefund
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

func (f *fixedWindow) exact() bool { return true }

func (f *fixedWindow) refundRetries() bool { return false }

func (f *fixedWindow) needsView() bool { return false }
