package durablecounter

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"

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
// One item per key, sw#<policy>#<keyhash>, holds the counts of the recent
// windows as attributes named by window index (c<i>) and the newest window
// index (w). A decision is one UpdateItem:
//
//	ADD #c :cost SET #w = :i, expires_at = :e [REMOVE older c<j>]
//	condition (attribute_not_exists(#w) OR #w <= :i)
//	      AND (attribute_not_exists(#c) OR #c <= :m)
//	      AND (attribute_not_exists(#p) OR #p <= :pg)
//
// where #c is c<i>, #p is c<i-1>, :pg is this instance's cached count of
// the previous window and :m = limit - cost - ceil(:pg * (1 - f)). DynamoDB
// conditions cannot multiply, so the weight is applied here, to the cached
// count, and the condition checks that the stored count is not above it:
// then the stored estimate is not above the one the condition enforces.
// Once window i has begun in the item, nobody writes window i-1 any more
// (#w <= :i), so its count is final and the cache stays right for the
// whole window: one write per decision. The first decision of an instance
// in a new window uses the count it last saw, which another instance may
// have raised since; the condition then fails, ALL_OLD returns the item,
// and the decision is made again with the real count (two calls, once per
// window and instance). The same happens to a condition that failed for
// any other stale reason: a failure is a denial only if the returned state
// denies.
type slidingWindow struct {
	prefix string
	limit  int64
	window int64
}

func newSlidingWindow(p params) algorithm {
	return &slidingWindow{prefix: "sw#" + p.name + "#", limit: p.limit, window: int64(p.window)}
}

func (a *slidingWindow) itemFor(key string, shard int32, _ int64) itemID {
	return itemID{prefix: a.prefix, key: key, slot: noSlot, shard: shard}
}

func (a *slidingWindow) capacity() int64 { return a.limit }

// at returns the window a decision at t is made in, and when: at the
// instant the item's latest writer decided at, if that is later than t
// (algorithm.instant: the weight of the previous window only falls with
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
		return clampCount(s.n, a.limit), clampCount(s.p, a.limit)
	case i - 1:
		return 0, clampCount(s.n, a.limit)
	}
	return 0, 0
}

// clampCount keeps a stored count within [0, limit] so that no arithmetic
// on it overflows; a count out of that range was not written by a Counter.
func clampCount(n, limit int64) int64 { return min(max(n, 0), limit) }

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
		prev := int64(0)
		if s.exists && s.w == i-1 {
			prev = s.n
		}
		s = state{exists: true, w: i, p: prev}
	}
	s.n += cost
	s.at = te
	return s
}

func (a *slidingWindow) receipt(_ state, te, _ int64) edgelimit.Receipt {
	return edgelimit.Receipt{At: te}
}

// giveBack takes the cost from the count of rc's window, wherever the item
// keeps it: the current window's, or the previous one's (which still
// weighs). Never from a later window's count.
func (a *slidingWindow) giveBack(s state, rc edgelimit.Receipt, _, cost int64) (state, bool) {
	i := floorDiv(rc.At, a.window)
	switch {
	case !s.exists:
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

func (a *slidingWindow) unknown(t, cost int64, allowed bool) edgelimit.Decision {
	i := floorDiv(t, a.window)
	d := edgelimit.Decision{Allowed: allowed, Reset: time.Duration((i+2)*a.window - t)}
	if !allowed {
		d.RetryAfter = d.Reset
	}
	return d
}

func (a *slidingWindow) expiry(s state, t int64) int64 {
	if !s.exists {
		return t
	}
	return (s.w + 2) * a.window
}

func (a *slidingWindow) compact(s state, _ int64) state {
	return state{exists: s.exists, n: s.n, p: s.p, w: s.w, at: s.at}
}

// maxRemove bounds the stale attributes one write removes.
const maxRemove = 16

func countName(i int64) string { return "c" + strconv.FormatInt(i, 10) }

func (a *slidingWindow) update(view state, t, cost int64, margin time.Duration, u *condUpdate) {
	if cost > a.limit {
		u.readOnly = true
		return
	}
	i, te := a.at(&view, t)
	_, pg := a.counts(&view, i) // this instance's count of window i-1
	m := a.limit - cost - a.share(pg, i, te)
	cur, prev := countName(i), countName(i-1)
	u.Name("#w", "w")
	u.Name("#a", "a")
	u.Name("#c", cur)
	u.Name("#p", prev)
	countCond := "(attribute_not_exists(#c) OR #c <= :m)"
	if m < 0 {
		countCond = "#c <= :m" // cannot fit with the cached count: fails, and returns the item
	}
	u.Cond = "(attribute_not_exists(#w) OR #w <= :i) AND " + countCond + " AND (attribute_not_exists(#p) OR #p <= :pg)"
	u.Expr = "ADD #c :d SET #w = :i, #a = :te, expires_at = :e"
	// Remove counts of windows before i-1 that the view knows of (and
	// i-2, which the previous window's writes left): the item keeps about
	// two counts.
	var remove []string
	add := func(name string) {
		if name != cur && name != prev && !slices.Contains(remove, name) && len(remove) < maxRemove {
			remove = append(remove, name)
		}
	}
	add(countName(i - 2))
	if view.exists {
		add(countName(view.w))
		add(countName(view.w - 1))
		if view.ext != nil {
			for _, s := range view.ext.stale {
				add(s)
			}
		}
	}
	if len(remove) > 0 {
		var b strings.Builder
		b.WriteString(u.Expr)
		b.WriteString(" REMOVE ")
		for k, name := range remove {
			ph := "#s" + strconv.Itoa(k)
			if k > 0 {
				b.WriteString(", ")
			}
			b.WriteString(ph)
			u.Name(ph, name)
		}
		u.Expr = b.String()
	}
	u.Value(":d", cost)
	u.Value(":i", i)
	u.Value(":m", m)
	u.Value(":pg", pg)
	u.Value(":te", te)
	u.Value(":e", expSec((i+2)*a.window+int64(margin)))
	u.Return = wire.ReturnAllNew
	u.at, u.rc = te, a.receipt(state{}, te, cost)
}

func (a *slidingWindow) decode(item wire.Item, _ int64) (state, error) {
	w, ok, err := attrInt(item, "w")
	if err != nil || !ok {
		return state{}, err
	}
	s := state{exists: true, w: w}
	if s.at, _, err = attrInt(item, "a"); err != nil {
		return state{}, err
	}
	for name := range attrs(item) {
		if len(name) < 2 || name[0] != 'c' {
			continue
		}
		j, err := strconv.ParseInt(name[1:], 10, 64)
		if err != nil {
			continue
		}
		switch j {
		case w:
			if s.n, _, err = attrInt(item, name); err != nil {
				return state{}, err
			}
		case w - 1:
			if s.p, _, err = attrInt(item, name); err != nil {
				return state{}, err
			}
		default:
			if s.ext == nil {
				s.ext = &stateExt{}
			}
			s.ext.stale = append(s.ext.stale, name)
		}
	}
	return s, nil
}

// refundUpdate takes the cost from the count of rc's window, while it still
// weighs (until the end of the next window); never from a later window's.
// A failed guard means the count is gone (the item moved on): nothing to
// give back.
func (a *slidingWindow) refundUpdate(rc edgelimit.Receipt, seen *state, _ int, tr, cost int64, u *condUpdate) bool {
	i := floorDiv(rc.At, a.window)
	if seen != nil || tr >= (i+2)*a.window {
		return false
	}
	u.Name("#c", countName(i))
	u.Expr = "ADD #c :r"
	u.Cond = "#c >= :d"
	u.Value(":r", -cost)
	u.Value(":d", cost)
	return true
}

func (a *slidingWindow) blind(_, _ int64) (state, bool) { return state{}, false }

func (a *slidingWindow) exact() bool { return false }

func (a *slidingWindow) refundRetries() bool { return false }

func (a *slidingWindow) needsView() bool { return true }
