package durablecounter

import (
	"time"

	"github.com/edgelimit/edgelimit"
)

// slidingWindow is the weighted two-window counter (Cloudflare's
// approximation of a rolling window). Windows are fixed, epoch-aligned
// and counted as in the fixed window; a request at time t in window i,
// a fraction f = (t - start(i)) / window into it, is admitted if
//
//	count(i) + cost + ceil(count(i-1) * (1 - f)) <= limit
//
// that is, the previous window's count weighs what is left of it. The
// estimate falls smoothly instead of resetting at the boundary, so the
// fixed window's 2x boundary burst cannot happen: at the boundary the whole
// previous count still weighs.
//
// The state is one item per key: the newest window's index (w) and count
// (n), the previous window's count (p), the instant its latest writer
// decided at (at) and its incarnation (r). A request is decided at the
// later of its instant and at, and never in a window older than w (see
// at), so a lagging clock is decided where the item is. Its item and
// conditional update are in slidingwindow_item.go.
type slidingWindow struct {
	prefix string
	pid    uint32
	limit  int64
	window int64
}

func newSlidingWindow(p params) algorithm {
	prefix := "sw#" + p.name + p.tag + "#"
	return &slidingWindow{prefix: prefix, pid: prefixID(prefix), limit: p.limit, window: int64(p.window)}
}

func (a *slidingWindow) itemFor(key string, shard int32, _ int64) itemID {
	return itemID{prefix: a.prefix, pid: a.pid, key: key, slot: noSlot, shard: shard}
}

// at returns the window a decision at t is made in, and when: at the
// instant the item's latest writer decided at, if that is later than t
// (rule.instant: the weight of the previous window only falls with
// time, so a request a little behind that writer is not denied by the
// gap), and never in a window older than the item's newest (an item
// written before writers recorded their instant), so that a lagging clock
// cannot add to a window the item has left behind.
func (a *slidingWindow) at(s *state, t int64) (i, te int64) {
	te = t
	if s.exists && s.at > te {
		te = s.at
	}
	i = floorDiv(te, a.window)
	if s.exists && s.w > i {
		return s.w, s.w * a.window
	}
	return i, te
}

func (a *slidingWindow) instant(s state, t int64) int64 {
	_, te := a.at(&s, t)
	return te
}

// counts returns the counts of window i (c) and of window i-1 (p).
func (a *slidingWindow) counts(s *state, i int64) (c, p int64) {
	if !s.exists {
		return 0, 0
	}
	switch s.w {
	case i:
		return clampCount(s.n), clampCount(s.p)
	case i - 1:
		return 0, clampCount(s.n)
	}
	return 0, 0
}

// maxCount bounds the counts the arithmetic sees: far above any limit (a
// charge may take a count above its limit), low enough that no sum or
// product of them overflows.
const maxCount = 1 << 52

// clampCount keeps a stored count within [0, maxCount]; a count out of
// that range was not written by a Counter.
func clampCount(n int64) int64 { return min(max(n, 0), maxCount) }

// share is the previous window's weight at te in window i:
// ceil(p * (end(i) - te) / window).
func (a *slidingWindow) share(p, i, te int64) int64 {
	return mulDivCeil(p, (i+1)*a.window-te, a.window)
}

func (a *slidingWindow) fits(s state, t, cost int64) bool {
	i, te := a.at(&s, t)
	c, p := a.counts(&s, i)
	return cost <= a.limit && c <= a.limit-cost-a.share(p, i, te)
}

func (a *slidingWindow) commit(s state, t, cost int64) state {
	i, te := a.at(&s, t)
	if !s.exists || s.w < i {
		prev, g := int64(0), newIncarnation()
		if s.exists {
			g = s.r
			if s.w == i-1 {
				prev = s.n
			}
		}
		s = state{exists: true, w: i, p: prev, r: g}
	}
	s.n += cost
	s.at = te
	return s
}

func (a *slidingWindow) receipt(s state, te, _ int64) edgelimit.Receipt {
	rc := edgelimit.Receipt{At: te}
	putInt64(rc.ID[:8], s.r)
	return rc
}

// giveBack takes the cost from the count of rc's window, wherever the item
// keeps it: the current window's, or the previous one's (which still
// weighs). Never from a later window's count.
func (a *slidingWindow) giveBack(s state, rc edgelimit.Receipt, _, cost int64) (state, bool) {
	i := floorDiv(rc.At, a.window)
	switch {
	case !s.exists:
	case getInt64(rc.ID[:8]) != 0 && getInt64(rc.ID[:8]) != s.r: // reset since
	case s.w == i && s.n >= cost:
		s.n -= cost
		return s, true
	case s.w == i+1 && s.p >= cost:
		s.p -= cost
		return s, true
	}
	return s, false
}

func (a *slidingWindow) decision(s state, t, cost int64, allowed bool) edgelimit.Decision {
	i, te := a.at(&s, t)
	c, p := a.counts(&s, i)
	used := c + a.share(p, i, te)
	d := edgelimit.Decision{Allowed: allowed, Remaining: max(0, a.limit-used)}
	// Reset, the effective window: until the estimate falls by one unit,
	// so that one more fits; with nothing counted, until the window ends
	// (everything spent before then counts fully until it ends).
	if target := min(used, a.limit) - 1; target >= 0 {
		d.Reset = time.Duration(a.firstAt(c, p, i, te, target) - t)
	} else {
		d.Reset = time.Duration((i+1)*a.window - t)
	}
	if allowed {
		return d
	}
	d.Remaining = min(d.Remaining, cost-1)
	if cost > a.limit {
		denyNever(&d, time.Duration(a.window))
		return d
	}
	// A cost of c fits once the estimate is at most limit - c, never
	// sooner than it falls by one (limit - c <= estimate - 1 for a denial).
	d.RetryAfter = time.Duration(a.firstAt(c, p, i, te, a.limit-cost) - t)
	return d
}

// firstAt returns the earliest instant from te on at which the estimate,
// with the counts c and p of window i and nothing else arriving, is at
// most target (>= 0).
func (a *slidingWindow) firstAt(c, p, i, te, target int64) int64 {
	W := a.window
	if room := target - c; room >= 0 {
		// In this window, once ceil(p*(end-t')/W) <= room, that is once
		// end - t' <= floor(room*W/p).
		if p <= room {
			return te + 1 // already; not reached for a real denial or a Reset
		}
		return (i+1)*W - mulDivFloor(room, W, p)
	}
	// In the next window, where c weighs as the previous count, once
	// ceil(c*(end'-t')/W) <= target.
	return (i+2)*W - mulDivFloor(target, W, c)
}

func (a *slidingWindow) expiry(s state, t int64) int64 {
	if !s.exists {
		return t
	}
	return (s.w + 2) * a.window
}

func (a *slidingWindow) compact(s state, _ int64) state {
	return state{exists: s.exists, n: s.n, p: s.p, w: s.w, r: s.r, at: s.at}
}

func (a *slidingWindow) windowEnd(t int64) int64 { return (floorDiv(t, a.window) + 1) * a.window }
