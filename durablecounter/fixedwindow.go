package durablecounter

import (
	"time"

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

// bounds returns the start of the window containing now, in nanoseconds.
func (f *fixedWindow) start(now time.Time) int64 {
	ns := now.UnixNano()
	q := ns / f.window
	if ns%f.window < 0 {
		q-- // floor for instants before 1970
	}
	return q * f.window
}

func (f *fixedWindow) plan(key string, cost int64, now time.Time) op {
	start := f.start(now)
	return op{
		kind:    opAdd,
		id:      itemID{prefix: f.prefix, key: key, slot: start / f.slotUnit},
		delta:   cost,
		limit:   f.limit,
		end:     time.Unix(0, start+f.window),
		needOld: cost > 1, // with cost 1 a denial means nothing is left
	}
}

func (f *fixedWindow) decide(o op, r result, now time.Time) edgelimit.Decision {
	d := edgelimit.Decision{
		Allowed: r.ok,
		Limit:   f.limit,
		Window:  time.Duration(f.window),
		Reset:   o.end.Sub(now),
	}
	switch {
	case !r.known:
		// Remaining 0: a denial of cost 1 means nothing is left; an allowed
		// batch whose counts could not be read reports none, conservatively.
	case r.ok:
		d.Remaining = max(0, f.limit-r.count)
	default:
		// The count that denied left less than the cost. A read after the
		// denial may see a later refund: clamp, so the reply stays
		// consistent with the denial.
		d.Remaining = min(max(0, f.limit-r.count), o.delta-1)
	}
	if !r.ok {
		// Nothing frees up before the window ends.
		d.RetryAfter = d.Reset
	}
	return d
}
