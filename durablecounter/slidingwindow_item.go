package durablecounter

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// The sliding window's item and its one conditional update (the rule is in
// slidingwindow.go). One item per key, sw#<policy>#<keyhash>, holds the
// counts of the recent windows as attributes named by window index (c<i>),
// the newest window index (w), its latest writer's instant (a) and its
// incarnation (g). A decision is one UpdateItem:
//
//	ADD #c :cost SET #w = :i, #a = :te, #g = if_not_exists(#g, :gn), expires_at = :e [REMOVE older c<j>]
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

func (a *slidingWindow) unknown(t, cost int64, allowed bool) edgelimit.Decision {
	i := floorDiv(t, a.window)
	d := edgelimit.Decision{Allowed: allowed, Reset: time.Duration((i+2)*a.window - t)}
	if !allowed {
		d.RetryAfter = d.Reset
	}
	return d
}

// maxRemove bounds the stale attributes one write removes.
const maxRemove = 16

func countName(i int64) string { return "c" + strconv.FormatInt(i, 10) }

func (a *slidingWindow) update(view state, t, cost int64, margin time.Duration, u *condUpdate) {
	if cost > a.limit {
		u.readOnly = true
		return
	}
	i, te := a.write(view, t, cost, margin, u)
	_, pg := a.counts(&view, i) // this instance's count of window i-1
	m := a.limit - cost - a.share(pg, i, te)
	u.Name("#p", countName(i-1))
	countCond := "(attribute_not_exists(#c) OR #c <= :m)"
	if m < 0 {
		countCond = "#c <= :m" // cannot fit with the cached count: fails, and returns the item
	}
	u.Cond = "(attribute_not_exists(#w) OR #w <= :i) AND " + countCond + " AND (attribute_not_exists(#p) OR #p <= :pg)"
	u.Value(":m", m)
	u.Value(":pg", pg)
	u.rc = a.receipt(state{}, te, cost)
}

// write fills u with the expression that spends cost in the window of t
// given view (and removes counts the item no longer needs), without a
// condition, and returns the window and instant it decided at.
func (a *slidingWindow) write(view state, t, cost int64, margin time.Duration, u *condUpdate) (i, te int64) {
	i, te = a.at(&view, t)
	cur, prev := countName(i), countName(i-1)
	u.Name("#w", "w")
	u.Name("#a", "a")
	u.Name("#c", cur)
	u.Name("#g", "g")
	u.Expr = "ADD #c :d SET #w = :i, #a = :te, #g = if_not_exists(#g, :gn), expires_at = :e"
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
	u.Value(":te", te)
	u.Value(":gn", newIncarnation())
	u.Value(":e", expSec((i+2)*a.window+int64(margin)))
	u.Return = wire.ReturnAllNew
	u.at = te
	return i, te
}

// chargeUpdate is update without the conditions on the counts: only that the
// item has not moved past window i (which would make the write count in a
// window the item left behind); a failure is retried with the state it
// returned, as a decision is.
func (a *slidingWindow) chargeUpdate(view state, t, cost int64, margin time.Duration, u *condUpdate) {
	a.write(view, t, cost, margin, u)
	u.Cond = "attribute_not_exists(#w) OR #w <= :i"
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
	if s.r, _, err = attrInt(item, "g"); err != nil {
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
	if g := getInt64(rc.ID[:8]); g != 0 {
		u.Name("#g", "g")
		u.Cond += " AND #g = :g0"
		u.Value(":g0", g)
	}
	u.Value(":r", -cost)
	u.Value(":d", cost)
	return true
}

func (a *slidingWindow) blind(_, _ int64) (state, bool) { return state{}, false }

func (a *slidingWindow) conditions() conditions { return conditions{usesView: true} }
