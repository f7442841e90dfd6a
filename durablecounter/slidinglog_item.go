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
// slidinglog.go). One item per key, sl#<policy>#<keyhash>:
//
//	b<ms>  units admitted in that millisecond (ms in base 36), one attribute
//	       per millisecond with admissions still in the window, plus expired
//	       ones not yet pruned
//	n      units ever appended; x  units pruned (removed with their b<ms>)
//	g      the item's incarnation (random, set when it is created)
//	r      refunds made
//
// The units in the window are n - x - (expired units still in the item).
// DynamoDB conditions cannot sum, so the decision is
//
//	ADD n :cost, #b :cost SET g = if_not_exists(g, :g), expires_at = :e
//	condition attribute_not_exists(n) OR (n <= :m AND g = :g0 AND r = :r0)
//
// with :m = limit - cost + E, where E counts the expired units this
// instance knows of (its last view of the item: x plus the expired b<ms>).
// A view only misses units, never invents them: units expire and are never
// un-expired, except that a refund lowers a bucket (it bumps r) and a
// recreated item starts from nothing (a new g); the condition checks g when
// E > 0 and r when E counts buckets, so E never exceeds the real expired
// count and the condition never admits what the window does not hold. Concurrent
// admissions do not conflict (ADD commutes), so one write decides as long
// as the instance's view is recent: ALL_NEW returns the item after every
// write. A view older than the window, or none, can make the condition
// fail spuriously; ALL_OLD then returns the item and the decision is made
// again (two calls).
//
// Expired buckets are pruned by the write that sees at least pruneAt of
// them: REMOVE them, ADD their units to x, under the condition that x is
// still what the view says (two instances pruning at once: one fails and
// decides again).

const (
	// pruneAt is how many expired buckets a write must see to prune them;
	// prunePer bounds the buckets one write removes.
	pruneAt  = 16
	prunePer = 64
)

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
		// Pruning needs the item the view saw: on an item gone since (a
		// reset, TTL), ADD #x would create a count of pruned units that
		// the new item never held, and the next views would count them as
		// expired. Without the item the condition fails, and the decision
		// is made again from the absent state, which prunes nothing.
		u.Cond = guards
		u.Expr += " SET #g = if_not_exists(#g, :gn), expires_at = :e REMOVE " + remove.String()
		u.Value(":e", expSec((newest+a.wms)*int64(time.Millisecond)+int64(margin)))
		u.Return = wire.ReturnAllNew
		return
	}
	u.Expr += " SET #g = if_not_exists(#g, :gn), expires_at = :e"
	u.Value(":e", expSec((newest+a.wms)*int64(time.Millisecond)+int64(margin)))
	u.Return = wire.ReturnAllNew
}

// chargeUpdate appends cost units at the decision's millisecond without a
// condition: ADD commutes with every other write, and it prunes nothing.
func (a *slidingLog) chargeUpdate(view state, t, cost int64, margin time.Duration, u *condUpdate) {
	te := a.instant(view, t)
	tm := msOf(te)
	newest := tm
	for _, b := range buckets(&view) {
		newest = max(newest, b.ms)
	}
	u.Name("#n", "n")
	u.Name("#b", bucketName(tm))
	u.Name("#g", "g")
	u.Expr = "ADD #n :d, #b :d SET #g = if_not_exists(#g, :gn), expires_at = :e"
	u.Value(":d", cost)
	u.Value(":gn", rand.Int64())
	u.Value(":e", expSec((newest+a.wms)*int64(time.Millisecond)+int64(margin)))
	u.Return = wire.ReturnAllNew
	u.at = te
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

func (a *slidingLog) unknown(_, _ int64, allowed bool) edgelimit.Decision {
	d := edgelimit.Decision{Allowed: allowed, Reset: time.Duration(a.window)}
	if !allowed {
		d.RetryAfter = d.Reset
	}
	return d
}

func (a *slidingLog) blind(_, _ int64) (state, bool) { return state{}, false }

func (a *slidingLog) conditions() conditions { return conditions{usesView: true} }
