package durablecounter

import (
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// fixedWindow counts cost units per key in windows of a fixed length
// aligned to the Unix epoch: [k*window, (k+1)*window). A request of cost c
// at t fits if
//
//	count(window of t) + c <= limit
//
// Each window is an item of its own (itemFor depends on t), so a new window
// starts from zero, and the state is the window's count (n) and the item's
// incarnation (w), which keeps a refund after a reset from giving anything
// back to the count that started afresh. Its item and conditional update
// are in fixedwindow_item.go.
//
// A client can spend its whole limit at the end of one window and again at
// the start of the next: up to twice the limit within a short time around a
// boundary. That is the algorithm, not a bug; sliding-window avoids it.
//
// Under clock skew the boundary is where the instances' clocks disagree:
// for the s after each window boundary of the leading clock, an instance s
// behind still counts in the previous window, whose item the others have
// left, so a burst of concurrent requests then passes up to the limit in
// each of the two windows: twice the limit at once, where one clock admits
// the limit (TestClockSkewBurst). So in a window of any instance's clock up
// to twice the limit can pass, not the limit plus (s / window) * limit of
// the other algorithms, which decide at the latest writer's instant that
// their one item records. The lagging instance cannot adopt the leader's
// window within its one write: that window is another item, which its
// write never sees. Each window's item still holds at most the limit,
// whoever wrote it (TestClockSkew).
type fixedWindow struct {
	prefix string
	pid    uint32
	limit  int64
	window int64 // nanoseconds
	// slotUnit converts a window start in nanoseconds into the number in the
	// partition key: seconds when the window is whole seconds, else
	// milliseconds (New accepts only whole-millisecond windows).
	slotUnit int64
	// cal, if set, makes the windows a calendar's periods (window: month):
	// window is then only its unit's nominal length (see period.go).
	cal *policy.Calendar
}

func newFixedWindow(p params) algorithm {
	unit := int64(time.Second)
	if p.window%time.Second != 0 {
		unit = int64(time.Millisecond)
	}
	if p.cal != nil {
		unit = int64(time.Second)
	}
	prefix := "fw#" + p.name + p.tag + "#"
	return &fixedWindow{prefix: prefix, pid: prefixID(prefix), limit: p.limit, window: int64(p.window), slotUnit: unit, cal: p.cal}
}

// start returns the start of the window containing t.
func (f *fixedWindow) start(t int64) int64 {
	if f.cal != nil {
		s, _ := f.cal.Bounds(t)
		return s
	}
	return floorDiv(t, f.window) * f.window
}

// end returns the end of the window containing t.
func (f *fixedWindow) end(t int64) int64 {
	if f.cal != nil {
		_, e := f.cal.Bounds(t)
		return e
	}
	return floorDiv(t, f.window)*f.window + f.window
}

func (f *fixedWindow) itemFor(key string, shard int32, t int64) itemID {
	return itemID{prefix: f.prefix, pid: f.pid, key: key, slot: f.start(t) / f.slotUnit, shard: shard}
}

func (f *fixedWindow) windowEnd(t int64) int64 { return f.end(t) }

// instant is t: each instance counts in the window of its own clock (see
// the type's documentation).
func (f *fixedWindow) instant(_ state, t int64) int64 { return t }

func (f *fixedWindow) fits(s state, _, cost int64) bool {
	return cost <= f.limit && s.n <= f.limit-cost
}

func (f *fixedWindow) commit(s state, _, cost int64) state {
	if !s.exists {
		s = state{exists: true, w: newIncarnation()}
	}
	s.n += cost
	return s
}

// receipt names the item's incarnation; At names the window.
func (f *fixedWindow) receipt(s state, te, _ int64) edgelimit.Receipt {
	rc := edgelimit.Receipt{At: te}
	putInt64(rc.ID[:8], s.w)
	return rc
}

// giveBack undoes a spending in the item of rc's window (the caller found
// it by rc.At); once that window has ended, nothing it held matters.
func (f *fixedWindow) giveBack(s state, rc edgelimit.Receipt, tr, cost int64) (state, bool) {
	if !s.exists || s.n < cost || tr >= f.end(rc.At) {
		return s, false
	}
	if g := getInt64(rc.ID[:8]); g != 0 && g != s.w {
		return s, false // the item was reset since: nothing of it is left
	}
	s.n -= cost
	return s, true
}

func (f *fixedWindow) decision(s state, t, cost int64, allowed bool) edgelimit.Decision {
	d := edgelimit.Decision{
		Allowed: allowed,
		// The effective window: until the window ends, nothing comes back.
		Reset:     time.Duration(f.end(t) - t),
		Remaining: max(0, f.limit-s.n),
	}
	f.period(&d, t)
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

func (f *fixedWindow) expiry(_ state, t int64) int64 { return f.end(t) }

func (f *fixedWindow) compact(s state, _ int64) state { return state{exists: s.exists, n: s.n, w: s.w} }
