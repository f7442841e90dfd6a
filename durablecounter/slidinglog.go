package durablecounter

import (
	"slices"
	"time"

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
// at millisecond resolution: the state is the units admitted in each
// millisecond (buckets, oldest first), with the item's incarnation (w) and,
// on DynamoDB, what the encoding needs (n, the units ever appended; p, the
// units pruned; r, the refunds made). Units carry the instant they were
// decided at: a unit stamped in another instance's future counts as in the
// window for every instance until it expires, so a lagging clock can only
// be stricter, and a request is decided at the later of its instant and
// the newest millisecond (instant). Its item and conditional update are in
// slidinglog_item.go.
type slidingLog struct {
	prefix string
	pid    uint32
	limit  int64
	window int64
	wms    int64 // window in milliseconds
}

// compactBuckets bounds the buckets a cached denial keeps.
const compactBuckets = 32

func newSlidingLog(p params) algorithm {
	prefix := "sl#" + p.name + p.tag + "#"
	return &slidingLog{prefix: prefix, pid: prefixID(prefix), limit: p.limit, window: int64(p.window),
		wms: int64(p.window / time.Millisecond)}
}

func msOf(t int64) int64 { return floorDiv(t, int64(time.Millisecond)) }

func (a *slidingLog) itemFor(key string, shard int32, _ int64) itemID {
	return itemID{prefix: a.prefix, pid: a.pid, key: key, slot: noSlot, shard: shard}
}

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

// instant is t, or the start of the item's newest millisecond if that is
// later (rule.instant): units only leave the window as time passes, so
// a request a little behind the item's latest writer is decided there, and
// its units are stamped there too, which keeps every window-long interval
// of the log within the limit.
func (a *slidingLog) instant(s state, t int64) int64 {
	if bs := buckets(&s); len(bs) > 0 {
		return max(t, bs[len(bs)-1].ms*int64(time.Millisecond))
	}
	return t
}

// used returns the units in the window at t (the decision's instant).
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
	return cost <= a.limit && a.used(&s, a.instant(s, t)) <= a.limit-cost
}

func (a *slidingLog) commit(s state, t, cost int64) state {
	tm := msOf(a.instant(s, t))
	if !s.exists {
		s.w = newIncarnation() // the memory store's item incarnation, as g
	}
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

func (a *slidingLog) receipt(s state, te, _ int64) edgelimit.Receipt {
	rc := edgelimit.Receipt{At: te}
	putInt64(rc.ID[:8], s.w)
	return rc
}

// giveBack takes the cost from the millisecond the spending went to, while
// it is still in the window at tr (after that its units have left anyway).
// Other refunds take only their own units from it, so it still holds the
// cost unless something is wrong.
func (a *slidingLog) giveBack(s state, rc edgelimit.Receipt, tr, cost int64) (state, bool) {
	ms := msOf(rc.At)
	if !a.live(bucket{ms: ms}, msOf(tr)) {
		return s, false
	}
	if g := getInt64(rc.ID[:8]); g != 0 && g != s.w {
		return s, false // another incarnation (a reset since)
	}
	bs := buckets(&s)
	k, found := slices.BinarySearchFunc(bs, ms, func(b bucket, ms int64) int { return cmp64(b.ms, ms) })
	if !found || bs[k].units < cost {
		return s, false
	}
	bs[k].units -= cost
	s.n -= cost
	s.r++
	return s, true
}

func (a *slidingLog) decision(s state, t, cost int64, allowed bool) edgelimit.Decision {
	tm := msOf(a.instant(s, t))
	used, oldest := int64(0), int64(0)
	any := false
	for _, b := range buckets(&s) {
		if a.live(b, tm) && b.units > 0 {
			used += b.units
			if !any {
				oldest, any = b.ms, true
			}
		}
	}
	d := edgelimit.Decision{Allowed: allowed, Remaining: max(0, a.limit-used)}
	// Reset, the effective window: until the oldest unit in the window
	// leaves it, the whole window when nothing is in it.
	d.Reset = time.Duration(a.window)
	if any {
		d.Reset = time.Duration((oldest+a.wms)*int64(time.Millisecond) - t)
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
	out := state{exists: s.exists, w: s.w}
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

func (a *slidingLog) windowEnd(t int64) int64 { return t + a.window }
