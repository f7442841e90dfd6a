package durablecounter

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// The sliding log's item and its conditional updates (the rule is in
// slidinglog.go): b<ms> per admitted millisecond, n, x, g, r.

// bucketName is the attribute of millisecond ms: "b" and ms in base 36
// (8 digits until 2059), to keep the item small.
func bucketName(ms int64) string { return "b" + strconv.FormatInt(ms, 36) }

func (a *slidingLog) update(view state, t, cost int64, margin time.Duration, u *condUpdate) {
	if cost > a.limit {
		u.readOnly = true
		return
	}
	te := a.instant(view, t)
	tm := msOf(te)
	u.Name("#n", "n")
	u.Name("#b", bucketName(tm))
	u.Name("#g", "g")
	u.Expr = "ADD #n :d, #b :d"
	u.Value(":d", cost)
	u.Value(":gn", rand.Int64())
	newest := tm
	var expired int64 // units the view shows expired but still in the item
	var old []bucket
	for _, b := range buckets(&view) {
		newest = max(newest, b.ms)
		if !a.live(b, tm) {
			expired += b.units
			old = append(old, b)
		}
	}
	E := int64(0)
	if view.exists {
		E = view.p + expired
	}
	u.Value(":m", a.limit-cost+E)
	// The guards that keep E a lower bound of the real count of expired
	// units, only as needed, so that concurrent writers do not conflict: the
	// same incarnation (a recreated item may count less); no refund since
	// the view (a refund lowers buckets the view counts as expired); and,
	// when pruning, nobody pruned since the view (x would count twice).
	guards := "#n <= :m"
	u.at, u.rc = te, edgelimit.Receipt{At: te} // the incarnation, unknown without a reply
	if E > 0 {
		guards += " AND #g = :g0"
		u.Value(":g0", view.w)
		u.rc = a.receipt(view, te, cost)
	}
	if expired > 0 {
		u.Name("#r", "r")
		if view.r == 0 {
			guards += " AND attribute_not_exists(#r)"
		} else {
			guards += " AND #r = :r0"
			u.Value(":r0", view.r)
		}
	}
	var remove strings.Builder
	if view.exists && len(old) >= pruneAt {
		old = old[:min(len(old), prunePer)]
		var units int64
		for k, b := range old {
			ph := "#o" + strconv.Itoa(k)
			u.Name(ph, bucketName(b.ms))
			if k > 0 {
				remove.WriteString(", ")
			}
			remove.WriteString(ph)
			units += b.units
		}
		u.Name("#x", "x")
		u.Expr += ", #x :xs"
		u.Value(":xs", units)
		if view.p == 0 {
			guards += " AND attribute_not_exists(#x)"
		} else {
			guards += " AND #x = :x0"
			u.Value(":x0", view.p)
		}
	}
	u.Cond = "attribute_not_exists(#n) OR (" + guards + ")"
	if guards == "#n <= :m" {
		u.Cond = "attribute_not_exists(#n) OR #n <= :m"
	}
	if remove.Len() > 0 {
		u.Expr += " SET #g = if_not_exists(#g, :gn), expires_at = :e REMOVE " + remove.String()
		u.Value(":e", expSec((newest+a.wms)*int64(time.Millisecond)+int64(margin)))
		u.Return = wire.ReturnAllNew
		return
	}
	u.Expr += " SET #g = if_not_exists(#g, :gn), expires_at = :e"
	u.Value(":e", expSec((newest+a.wms)*int64(time.Millisecond)+int64(margin)))
	u.Return = wire.ReturnAllNew
}

func (a *slidingLog) decode(item wire.Item, _ int64) (state, error) {
	n, ok, err := attrInt(item, "n")
	if err != nil || !ok {
		return state{}, err
	}
	s := state{exists: true, n: n, ext: &stateExt{}}
	if s.p, _, err = attrInt(item, "x"); err != nil {
		return state{}, err
	}
	if s.w, _, err = attrInt(item, "g"); err != nil {
		return state{}, err
	}
	if s.r, _, err = attrInt(item, "r"); err != nil {
		return state{}, err
	}
	for name := range attrs(item) {
		if len(name) < 2 || name[0] != 'b' {
			continue
		}
		ms, err := strconv.ParseInt(name[1:], 36, 64)
		if err != nil {
			continue
		}
		units, _, err := attrInt(item, name)
		if err != nil {
			return state{}, err
		}
		s.ext.buckets = append(s.ext.buckets, bucket{ms: ms, units: units})
	}
	slices.SortFunc(s.ext.buckets, func(x, y bucket) int { return cmp64(x.ms, y.ms) })
	return s, nil
}

// refundUpdate takes the cost from the millisecond the spending went to
// (its bucket, and n), and counts the refund in r, which views that count
// expired buckets check. A refund after the bucket left the window has
// nothing to do, and a failed guard means the bucket no longer holds the
// cost (pruned, or the item recreated): nothing to give back either.
func (a *slidingLog) refundUpdate(rc edgelimit.Receipt, seen *state, _ int, tr, cost int64, u *condUpdate) bool {
	ms := msOf(rc.At)
	if seen != nil || !a.live(bucket{ms: ms}, msOf(tr)) {
		return false
	}
	u.Name("#n", "n")
	u.Name("#b", bucketName(ms))
	u.Name("#r", "r")
	u.Expr = "ADD #n :nc, #b :nc, #r :one"
	u.Cond = "#b >= :c"
	if g := getInt64(rc.ID[:8]); g != 0 {
		u.Name("#g", "g")
		u.Cond += " AND #g = :g0"
		u.Value(":g0", g)
	}
	u.Value(":nc", -cost)
	u.Value(":c", cost)
	u.Value(":one", 1)
	return true
}
