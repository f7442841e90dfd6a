package durablecounter

import (
	"encoding/binary"
	"math/bits"
	"time"

	"iter"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// algorithm is one counting algorithm (one file each). It defines the state
// of an item, decides requests against it, and says how a DynamoDB
// conditional update expresses that decision, without any SDK type (a
// wire.Update: expression strings, names, numbers), and reads an item back
// through a wire.Item. The stores and the Counter do
// the rest; the same pure methods decide on both stores and in the deny
// cache, which is what makes their semantics identical.
//
// Times are Unix nanoseconds. Every method is safe for concurrent use: an
// algorithm holds only its policy's parameters.
type algorithm interface {
	// itemFor names the item that decides key at t; shard is noShard for a
	// policy that is not sharded.
	itemFor(key string, shard int32, t int64) itemID
	// capacity is the most units one request can spend (limit, or burst for
	// gcra); a larger cost is denied without a write.
	capacity() int64
	// instant is when a request at t is decided against s: t, or the latest
	// instant s records of its writers, if that is later. A request whose
	// clock is a little behind the item's last writer is decided as if at
	// that writer's instant, where it fits whenever it would have fitted
	// had it arrived first: deciding at the earlier instant would deny it
	// by the gap (issue #10). Every algorithm's rule only loosens as time
	// passes, so this never admits what the rule at the latest clock
	// denies.
	instant(s state, t int64) int64
	// fits reports whether cost units fit into s at t. s may be a lower
	// bound of the stored state (a snapshot): the stored state only grows
	// between refunds, so a request that does not fit s does not fit it.
	fits(s state, t, cost int64) bool
	// commit returns s with cost units spent at t, where fits(s, t, cost)
	// holds. It may reuse s's buckets (the memory store owns them).
	commit(s state, t, cost int64) state
	// receipt returns what a spending of cost decided at te (instant(s0, t)
	// for the state s0 before it) left to refund, given s, the state right
	// after it. The Counter adds the shard to Slot.
	receipt(s state, te, cost int64) edgelimit.Receipt
	// giveBack returns s with the spending rc records (of cost units)
	// undone as of tr, never below zero, and reports whether anything was
	// given back. It may change s's buckets in place.
	giveBack(s state, rc edgelimit.Receipt, tr, cost int64) (state, bool)
	// decision reports s at t to a request of cost: allowed (s includes the
	// request if it was spent, or is the state without it in a batch that
	// was not committed, or a peek) or denied by s. Its Limit and Window
	// are the Counter's to fill.
	decision(s state, t, cost int64, allowed bool) edgelimit.Decision
	// unknown is the decision when the state could not be read: nothing
	// left, and the longest effective window the algorithm can have.
	unknown(t, cost int64, allowed bool) edgelimit.Decision
	// expiry is when an item with state s stops mattering: from then on it
	// decides exactly as an absent item. The stores keep it a margin longer.
	expiry(s state, t int64) int64
	// compact returns a copy of s for the caches that shares nothing with
	// s, is small, and is a lower bound of s at t and every later time.
	compact(s state, t int64) state

	// update fills u with the conditional UpdateItem that spends cost at t
	// if the stored state fits it, given view, this instance's latest
	// knowledge of the item (the zero state if none). The condition must
	// fail whenever the stored state does not fit, whatever the view; it
	// may also fail when the view is out of date, and then the store
	// decides again with the state the failure returned. update sets u.at
	// to the instant it decided at, and u.rc to the receipt the write
	// guarantees without its reply (a transaction returns none); with u.tx
	// set it may add conditions that make that receipt exact.
	update(view state, t, cost int64, margin time.Duration, u *condUpdate)
	// decode reads an item (from ALL_NEW, ALL_OLD or a read) into a state;
	// an empty item is the zero state.
	decode(item wire.Item, now int64) (state, error)
	// refundUpdate fills u with the guarded update that undoes the
	// spending rc records, as of tr, or reports false when there is nothing
	// (left) to give back. seen is nil on the first attempt, else the state
	// of the item when the previous attempt's guard failed; attempt counts
	// from 1. Each algorithm's guard fails only when nothing is left to
	// give back, or (gcra) when a concurrent refund changed what is left,
	// and then the next attempt's update is computed from seen.
	refundUpdate(rc edgelimit.Receipt, seen *state, attempt int, tr, cost int64, u *condUpdate) bool
	// refundRetries: refundUpdate's guard can fail for a concurrent refund,
	// not only when nothing is left to give back (gcra), so a failure is
	// followed by another attempt with the state it showed.
	refundRetries() bool
	// blind returns, for a failed condition that came without the old item
	// (dynalite ignores ALL_OLD), a lower bound of the state that proves
	// the denial without a read, if the failure alone proves it.
	blind(t, cost int64) (state, bool)
	// exact: the condition is exactly "fits", so a failure proves a denial
	// and a read after it only fills the headers (fixed window).
	exact() bool
	// needsView: update uses the view, so the remote store caches the last
	// state it saw of each item.
	needsView() bool
}

// Receipts (edgelimit.Receipt, in every allowed decision) say what a
// decision spent, so that Counter.Refund undoes exactly that:
//
//	At    the instant the algorithm decided at (Unix nanoseconds): it names
//	      the fixed window, the sliding window and the sliding log's
//	      millisecond the units went to
//	Slot  the shard in the low 16 bits; gcra: the bucket's period above them
//	ID    gcra: the TAT right after the spend, and the period's refunds
//	      before it (-1: unknown); sliding log: the item's incarnation
const (
	shardBits = 16
	shardMask = 1<<shardBits - 1
)

// state is one item's state as an algorithm sees it: decoded from a
// DynamoDB item, held by the Memory store, or cached. Its fields mean what
// its algorithm says; the zero state is an absent item.
type state struct {
	// exists: the item is stored.
	exists bool
	// n: fixed window: units spent in the window; sliding window: units of
	// window w; sliding log: units ever appended; gcra: the theoretical
	// arrival time (Unix nanoseconds).
	n int64
	// p: sliding window: units of window w-1; sliding log: units pruned.
	p int64
	// w: sliding window: the newest window's index; sliding log: the
	// item's incarnation.
	w int64
	// r: sliding log: refunds made (a refund changes buckets a view may
	// count as expired, so views are checked against it); gcra: the time
	// given back by refunds in the current period.
	r int64
	// at: sliding window and gcra: the instant its latest writer decided
	// at (see algorithm.instant); gcra's p is the bucket's period, a random
	// number that changes whenever the bucket is full when a request comes.
	at int64
	// ext holds what only some algorithms need, so that the others' states
	// stay small and allocation-free.
	ext *stateExt
}

type stateExt struct {
	// buckets of the sliding log, oldest first.
	buckets []bucket
	// stale names DynamoDB attributes the item no longer needs, to remove
	// with a later write.
	stale []string
}

// bucket is the units a sliding log admitted in one millisecond.
type bucket struct {
	ms, units int64
}

// condUpdate is one conditional update (or one member of a transaction)
// as an algorithm builds it: the update itself, SDK-free, and what the
// protocol needs to know about it.
type condUpdate struct {
	wire.Update
	// readOnly: the request can never fit (cost above capacity); read the
	// state for the headers instead of writing.
	readOnly bool
	// tx: the update goes into a transaction, whose reply has no values.
	tx bool
	// at is the instant the update decides at; rc the receipt a successful
	// write guarantees without its reply.
	at int64
	rc edgelimit.Receipt
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

// expSec converts a Unix-nanosecond expiry into expires_at: epoch seconds,
// rounded up.
func expSec(ns int64) int64 {
	s := floorDiv(ns, int64(time.Second))
	if ns%int64(time.Second) != 0 {
		s++
	}
	return s
}

// attrInt reads a number attribute; ok is false when it is absent (or the
// item is).
func attrInt(item wire.Item, name string) (int64, bool, error) {
	if item == nil {
		return 0, false, nil
	}
	return item.Int(name)
}

// attrs yields the attribute names of item (none if it is nil).
func attrs(item wire.Item) iter.Seq[string] {
	if item == nil {
		return func(func(string) bool) {}
	}
	return item.Attrs()
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
