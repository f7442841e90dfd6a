package durablecounter

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"time"

	"github.com/edgelimit/edgelimit"
)

// rule is one counting algorithm's arithmetic on the state of one item:
// pure functions of a state, an instant and a cost, with no DynamoDB type
// and no clock, which decide the same way on every store and in the deny
// cache (that is what makes the stores' semantics identical). Each
// algorithm's rule is in its file (fixedwindow.go, slidingwindow.go,
// slidinglog.go, gcra.go), and tested there at fixed instants; how the
// DynamoDB store writes and reads its item is its encoding, in
// <algorithm>_item.go (see encoding, dynamo.go). The Counter, its caches
// and the Memory store use only the rule.
//
// Times are Unix nanoseconds. Every method is safe for concurrent use: a
// rule holds only its policy's parameters (one shard's share).
type rule interface {
	// itemFor names the item that decides key at t; shard is noShard for a
	// policy that is not sharded. (Only the fixed window's depends on t:
	// one item per window.)
	itemFor(key string, shard int32, t int64) itemID
	// windowEnd is the end of the window a grant "for the current window"
	// at t lasts: the fixed window's (and the sliding window's) end, else
	// one window from t.
	windowEnd(t int64) int64

	// instant is when a request at t is decided against s: t, or the latest
	// instant s records of its writers, if that is later. A request whose
	// clock is a little behind the item's last writer is decided as if at
	// that writer's instant, where it fits whenever it would have fitted
	// had it arrived first: deciding at the earlier instant would deny it
	// by the gap (issue #10). Every rule only loosens as time passes, so
	// this never admits what the rule at the latest clock denies.
	instant(s state, t int64) int64
	// fits reports whether cost units fit into s at t. s may be a lower
	// bound of the stored state (a snapshot): the stored state only grows
	// between refunds, so a request that does not fit s does not fit it.
	fits(s state, t, cost int64) bool
	// commit returns s with cost units spent at t, where fits(s, t, cost)
	// holds (or whether or not it does, for a charge). It may reuse s's
	// buckets (the memory store owns them).
	commit(s state, t, cost int64) state
	// decision reports s at t to a request of cost: allowed (s includes the
	// request if it was spent, or is the state without it in a batch that
	// was not committed, or a peek) or denied by s. Its Limit and Window
	// are the Counter's to fill.
	decision(s state, t, cost int64, allowed bool) edgelimit.Decision

	// receipt returns what a spending of cost decided at te (instant(s0, t)
	// for the state s0 before it) left to refund, given s, the state right
	// after it. The Counter adds the shard to Slot.
	receipt(s state, te, cost int64) edgelimit.Receipt
	// giveBack returns s with the spending rc records (of cost units)
	// undone as of tr, never below zero, and reports whether anything was
	// given back. It may change s's buckets in place.
	giveBack(s state, rc edgelimit.Receipt, tr, cost int64) (state, bool)

	// expiry is when an item with state s stops mattering: from then on it
	// decides exactly as an absent item. The stores keep it a margin longer.
	expiry(s state, t int64) int64
	// compact returns a copy of s for the caches that shares nothing with
	// s, is small, and is a lower bound of s at t and every later time.
	compact(s state, t int64) state
}

// algorithm is what a Counter holds for one shard of one set of limits:
// one type per algorithm that is both its rule and its DynamoDB encoding.
type algorithm interface {
	rule
	encoding
}

// newIncarnation returns a random, non-zero number that names one life of
// an item, so that a refund of a spending made before a reset (which
// deletes the item) finds another incarnation and gives nothing back.
func newIncarnation() int64 { return rand.Int64N(1<<62) + 1 }

// Receipts (edgelimit.Receipt, in every allowed decision) say what a
// decision spent, so that Counter.Refund undoes exactly that:
//
//	At    the instant the algorithm decided at (Unix nanoseconds): it names
//	      the fixed window, the sliding window and the sliding log's
//	      millisecond the units went to
//	Slot  the shard in the low 16 bits (poolShard: the key's grant paid);
//	      gcra: the bucket's period above them
//	ID    gcra: the TAT right after the spend, and the period's refunds
//	      before it (-1: unknown); fixed and sliding window, sliding log:
//	      the item's incarnation (0: unknown); grant: the grant's end
const (
	shardBits = 16
	shardMask = 1<<shardBits - 1
)

// state is one item's state as a rule sees it: decoded from a DynamoDB
// item (encoding.decode), held by the Memory store, or cached. Its fields mean what
// its algorithm says; the zero state is an absent item.
type state struct {
	// exists: the item is stored.
	exists bool
	// n: fixed window: units spent in the window; sliding window: units of
	// window w; sliding log: units ever appended; gcra: the theoretical
	// arrival time (Unix nanoseconds); grant pool: units left.
	n int64
	// p: sliding window: units of window w-1; sliding log: units pruned.
	p int64
	// w: sliding window: the newest window's index; sliding log and fixed
	// window: the item's incarnation (newIncarnation); grant pool: unused.
	w int64
	// r: sliding log: refunds made (a refund changes buckets a view may
	// count as expired, so views are checked against it); gcra: the time
	// given back by refunds in the current period; sliding window: the
	// item's incarnation.
	r int64
	// at: sliding window and gcra: the instant its latest writer decided
	// at (see rule.instant); gcra's p is the bucket's period, a random
	// number that changes whenever the bucket is full when a request comes.
	// Grant pool: the end of the grant (Unix nanoseconds).
	at int64
	// ext holds what only some algorithms need, so that the others' states
	// stay small and allocation-free.
	ext *stateExt
}

type stateExt struct {
	// buckets of the sliding log, oldest first.
	buckets []bucket
	// stale is the sliding window encoding's: attributes the item no
	// longer needs, to remove with a later write.
	stale []string
}

// bucket is the units a sliding log admitted in one millisecond.
type bucket struct {
	ms, units int64
}

// floorDiv returns floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// mulDivFloor returns floor(a * b / c) for 0 <= a, b and a*b/c < 2^63,
// without overflowing the product.
func mulDivFloor(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// mulDivCeil returns ceil(a * b / c) under the conditions of mulDivFloor.
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	return int64(q)
}

// denyNever fills the decision of a request that can never fit (cost above
// capacity): RetryAfter is the window, as kvbucket answers it, and never
// shorter than the effective window.
func denyNever(d *edgelimit.Decision, window time.Duration) {
	d.RetryAfter = max(window, d.Reset)
}

// putInt64 and getInt64 store numbers in a Receipt's ID.
func putInt64(b []byte, v int64) { binary.LittleEndian.PutUint64(b, uint64(v)) }

func getInt64(b []byte) int64 { return int64(binary.LittleEndian.Uint64(b)) }
