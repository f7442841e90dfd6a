package durablecounter

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
)

// MaxSlidingLogLimit is the largest limit (per shard) of a sliding-log
// policy. Its item holds one attribute per millisecond in which units were
// admitted within the window, so its size, and with it the write capacity
// every decision consumes, grows with the limit: at this limit an item is
// at most about 270 KB of DynamoDB's 400 KB. See the package documentation.
const MaxSlidingLogLimit = 20_000

// slidingLog is an exact rolling window: a request at time t is admitted if
// the units admitted in (t - window, t], plus its cost, are at most the
// limit. It is what Redis users build with a sorted set of timestamps, here
// in one DynamoDB item per key, sl#<policy>#<keyhash>, at millisecond
// resolution:
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
// again (two calls). Appended units carry the writer's clock: a unit
// stamped in another instance's future counts as in the window for every
// instance until it expires, so a lagging clock can only be stricter.
//
// Expired buckets are pruned by the write that sees at least pruneAt of
// them: REMOVE them, ADD their units to x, under the condition that x is
// still what the view says (two instances pruning at once: one fails and
// decides again).
type slidingLog struct {
	prefix string
	limit  int64
	window int64
	wms    int64 // window in milliseconds
}

const (
	// pruneAt is how many expired buckets a write must see to prune them;
	// prunePer bounds the buckets one write removes.
	pruneAt  = 16
	prunePer = 64
	// compactBuckets bounds the buckets a cached denial keeps.
	compactBuckets = 32
)

func newSlidingLog(p params) algorithm {
	return &slidingLog{prefix: "sl#" + p.name + "#", limit: p.limit, window: int64(p.window),
		wms: int64(p.window / time.Millisecond)}
}

func msOf(t int64) int64 { return floorDiv(t, int64(time.Millisecond)) }

func (a *slidingLog) itemFor(key string, shard int32, _ int64) itemID {
	return itemID{prefix: a.prefix, key: key, slot: noSlot, shard: shard}
}

func (a *slidingLog) capacity() int64 { return a.limit }

func buckets(s *state) []bucket {
	if s.ext == nil {
		return nil
	}
	return s.ext.buckets
}

// live reports whether a bucket still counts at millisecond tm: it does
// until a whole window has passed after it (a bucket stamped in the future
// by a clock ahead of ours counts too).
func (a *slidingLog) live(b bucket, tm int64) bool { return b.ms > tm-a.wms }

// used returns the units in the window at t.
func (a *slidingLog) used(s *state, t int64) int64 {
	tm, n := msOf(t), int64(0)
	for _, b := range buckets(s) {
		if a.live(b, tm) {
			n += max(b.units, 0)
		}
	}
	return n
}

func (a *slidingLog) fits(s state, t, cost int64) bool {
	return cost <= a.limit && a.used(&s, t) <= a.limit-cost
}

func (a *slidingLog) commit(s state, t, cost int64) state {
	tm := msOf(t)
	s.exists = true
	if s.ext == nil {
		s.ext = &stateExt{}
	}
	bs := s.ext.buckets
	// The memory store prunes as it goes.
	k := 0
	for k < len(bs) && !a.live(bs[k], tm) {
		k++
	}
	if k > 0 {
		bs = append(bs[:0], bs[k:]...)
	}
	j, found := slices.BinarySearchFunc(bs, tm, func(b bucket, ms int64) int { return cmp64(b.ms, ms) })
	if found {
		bs[j].units += cost
	} else {
		bs = slices.Insert(bs, j, bucket{ms: tm, units: cost})
	}
	s.ext.buckets = bs
	s.n += cost
	return s
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// takeOldest returns which live buckets a refund of cost at t takes from,
// oldest first (index and units), or false when fewer are in the window.
// Taking from the oldest is conservative: the units given back would have
// left the window first.
func (a *slidingLog) takeOldest(s *state, t, cost int64) ([][2]int64, bool) {
	if a.used(s, t) < cost {
		return nil, false
	}
	tm := msOf(t)
	var take [][2]int64
	left := cost
	for k, b := range buckets(s) {
		if left == 0 {
			break
		}
		if !a.live(b, tm) || b.units <= 0 {
			continue
		}
		u := min(b.units, left)
		take = append(take, [2]int64{int64(k), u})
		left -= u
	}
	return take, true
}

func (a *slidingLog) giveBack(s state, t, cost int64) (state, bool) {
	take, ok := a.takeOldest(&s, t, cost)
	if !ok {
		return s, false
	}
	for _, tk := range take {
		s.ext.buckets[tk[0]].units -= tk[1]
	}
	s.n -= cost
	s.r++
	return s, true
}

func (a *slidingLog) decision(s state, t, cost int64, allowed bool) edgelimit.Decision {
	tm := msOf(t)
	used, newest := int64(0), int64(0)
	any := false
	for _, b := range buckets(&s) {
		if a.live(b, tm) && b.units > 0 {
			used += b.units
			newest, any = b.ms, true
		}
	}
	d := edgelimit.Decision{
		Allowed:   allowed,
		Limit:     a.limit,
		Window:    time.Duration(a.window),
		Remaining: max(0, a.limit-used),
	}
	if any { // when the newest unit leaves the window
		d.Reset = time.Duration((newest+a.wms)*int64(time.Millisecond) - t)
	}
	if allowed {
		return d
	}
	d.Remaining = min(d.Remaining, cost-1)
	if cost > a.limit {
		denyNever(&d, time.Duration(a.window))
		return d
	}
	// Wait until enough of the oldest units have left the window.
	need, acc := used+cost-a.limit, int64(0)
	for _, b := range buckets(&s) {
		if !a.live(b, tm) || b.units <= 0 {
			continue
		}
		if acc += b.units; acc >= need {
			d.RetryAfter = time.Duration((b.ms+a.wms)*int64(time.Millisecond) - t)
			break
		}
	}
	if d.RetryAfter <= 0 { // not reached for a real denial
		d.RetryAfter = time.Millisecond
	}
	d.Reset = max(d.Reset, d.RetryAfter)
	return d
}

func (a *slidingLog) unknown(_, _ int64, allowed bool) edgelimit.Decision {
	d := edgelimit.Decision{Allowed: allowed, Limit: a.limit, Window: time.Duration(a.window),
		Reset: time.Duration(a.window)}
	if !allowed {
		d.RetryAfter = d.Reset
	}
	return d
}

func (a *slidingLog) expiry(s state, t int64) int64 {
	bs := buckets(&s)
	if len(bs) == 0 {
		return t
	}
	return (bs[len(bs)-1].ms + a.wms) * int64(time.Millisecond)
}

// compact keeps the oldest live buckets and folds the rest into the last
// one kept: they then leave the window earlier than they really do, so the
// copy holds fewer units at every later time (a lower bound).
func (a *slidingLog) compact(s state, t int64) state {
	out := state{exists: s.exists}
	bs := buckets(&s)
	if len(bs) == 0 {
		return out
	}
	tm := msOf(t)
	kept := make([]bucket, 0, min(len(bs), compactBuckets))
	for _, b := range bs {
		if b.units <= 0 || !a.live(b, tm) {
			continue
		}
		if len(kept) == compactBuckets {
			kept[len(kept)-1].units += b.units
			continue
		}
		kept = append(kept, b)
	}
	out.ext = &stateExt{buckets: kept}
	return out
}

// bucketName is the attribute of millisecond ms: "b" and ms in base 36
// (8 digits until 2059), to keep the item small.
func bucketName(ms int64) string { return "b" + strconv.FormatInt(ms, 36) }

func (a *slidingLog) update(view state, t, cost int64, margin time.Duration, u *ddbUpdate) {
	if cost > a.limit {
		u.readOnly = true
		return
	}
	tm := msOf(t)
	u.name("#n", "n")
	u.name("#b", bucketName(tm))
	u.name("#g", "g")
	u.update = "ADD #n :d, #b :d"
	u.value(":d", cost)
	u.value(":gn", rand.Int64())
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
	u.value(":m", a.limit-cost+E)
	// The guards that keep E a lower bound of the real count of expired
	// units, only as needed, so that concurrent writers do not conflict: the
	// same incarnation (a recreated item may count less); no refund since
	// the view (a refund lowers buckets the view counts as expired); and,
	// when pruning, nobody pruned since the view (x would count twice).
	guards := "#n <= :m"
	if E > 0 {
		guards += " AND #g = :g0"
		u.value(":g0", view.w)
	}
	if expired > 0 {
		u.name("#r", "r")
		if view.r == 0 {
			guards += " AND attribute_not_exists(#r)"
		} else {
			guards += " AND #r = :r0"
			u.value(":r0", view.r)
		}
	}
	var remove strings.Builder
	if view.exists && len(old) >= pruneAt {
		old = old[:min(len(old), prunePer)]
		var units int64
		for k, b := range old {
			ph := "#o" + strconv.Itoa(k)
			u.name(ph, bucketName(b.ms))
			if k > 0 {
				remove.WriteString(", ")
			}
			remove.WriteString(ph)
			units += b.units
		}
		u.name("#x", "x")
		u.update += ", #x :xs"
		u.value(":xs", units)
		if view.p == 0 {
			guards += " AND attribute_not_exists(#x)"
		} else {
			guards += " AND #x = :x0"
			u.value(":x0", view.p)
		}
	}
	u.cond = "attribute_not_exists(#n) OR (" + guards + ")"
	if guards == "#n <= :m" {
		u.cond = "attribute_not_exists(#n) OR #n <= :m"
	}
	if remove.Len() > 0 {
		u.update += " SET #g = if_not_exists(#g, :gn), expires_at = :e REMOVE " + remove.String()
		u.value(":e", expSec((newest+a.wms)*int64(time.Millisecond)+int64(margin)))
		u.ret = types.ReturnValueAllNew
		return
	}
	u.update += " SET #g = if_not_exists(#g, :gn), expires_at = :e"
	u.value(":e", expSec((newest+a.wms)*int64(time.Millisecond)+int64(margin)))
	u.ret = types.ReturnValueAllNew
}

func (a *slidingLog) decode(item map[string]types.AttributeValue, _ int64) (state, error) {
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
	for name := range item {
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

func (a *slidingLog) refundUpdate(view state, t, cost int64, u *ddbUpdate) bool {
	take, ok := a.takeOldest(&view, t, cost)
	if !ok {
		return false
	}
	u.name("#n", "n")
	u.name("#g", "g")
	u.name("#r", "r")
	var add, cond strings.Builder
	add.WriteString("ADD #n :nc, #r :one")
	cond.WriteString("#g = :g0")
	for k, tk := range take {
		ph, v := "#t"+strconv.Itoa(k), ":t"+strconv.Itoa(k)
		u.name(ph, bucketName(view.ext.buckets[tk[0]].ms))
		add.WriteString(", " + ph + " :n" + strconv.Itoa(k))
		cond.WriteString(" AND " + ph + " >= " + v)
		u.value(v, tk[1])
		u.value(":n"+strconv.Itoa(k), -tk[1])
	}
	u.update = add.String()
	u.cond = cond.String()
	u.value(":nc", -cost)
	u.value(":one", 1)
	u.value(":g0", view.w)
	return true
}

func (a *slidingLog) blind(_, _ int64) (state, bool) { return state{}, false }

func (a *slidingLog) exact() bool { return false }

func (a *slidingLog) needsView() bool { return true }

func (a *slidingLog) refundUsesView() bool { return true }
