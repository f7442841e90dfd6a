package durablecounter

import (
	"math/bits"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
)

// algorithm is one counting algorithm (one file each). It defines the state
// of an item, decides requests against it, and says how a DynamoDB
// conditional update expresses that decision. The stores and the Counter do
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
	// fits reports whether cost units fit into s at t. s may be a lower
	// bound of the stored state (a snapshot): the stored state only grows
	// between refunds, so a request that does not fit s does not fit it.
	fits(s state, t, cost int64) bool
	// commit returns s with cost units spent at t, where fits(s, t, cost)
	// holds. It may reuse s's buckets (the memory store owns them).
	commit(s state, t, cost int64) state
	// giveBack returns s with the spending of cost units at t undone, never
	// below zero, and reports whether there was that much to give back. It
	// may change s's buckets in place.
	giveBack(s state, t, cost int64) (state, bool)
	// decision reports s at t to a request of cost: allowed (s includes the
	// request if it was spent, or is the state without it in a batch that
	// was not committed) or denied by s.
	decision(s state, t, cost int64, allowed bool) edgelimit.Decision
	// unknown is the decision when the state could not be read: nothing
	// left, and the longest reset the algorithm can have.
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
	// decides again with the state the failure returned.
	update(view state, t, cost int64, margin time.Duration, u *ddbUpdate)
	// decode reads an item (from ALL_NEW, ALL_OLD or a read) into a state;
	// an empty item is the zero state.
	decode(item map[string]types.AttributeValue, now int64) (state, error)
	// refundUpdate fills u with the guarded update that gives back cost
	// units at t, or reports false when view shows nothing to give back.
	refundUpdate(view state, t, cost int64, u *ddbUpdate) bool
	// blind returns, for a failed condition that came without the old item
	// (dynalite ignores ALL_OLD), a lower bound of the state that proves
	// the denial without a read, if the failure alone proves it.
	blind(t, cost int64) (state, bool)
	// exact: the condition is exactly "fits", so a failure proves a denial
	// and a read after it only fills the headers (fixed window).
	exact() bool
	// refundUsesView: refundUpdate guards what the view shows, so a
	// failed guard may only mean the view was out of date (sliding log).
	refundUsesView() bool
	// needsView: update uses the view, so the DynamoStore caches the last
	// state it saw of each item.
	needsView() bool
}

// state is one item's state as an algorithm sees it: decoded from a
// DynamoDB item, held by the MemoryStore, or cached. Its fields mean what
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
	// count as expired, so views are checked against it).
	r int64
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

// ddbUpdate is one conditional UpdateItem (or one Update of a transaction).
type ddbUpdate struct {
	update, cond string
	names        map[string]string
	values       map[string]types.AttributeValue
	ret          types.ReturnValue
	// readOnly: the request can never fit (cost above capacity); read the
	// state for the headers instead of writing.
	readOnly bool
}

func (u *ddbUpdate) name(placeholder, attr string) {
	if u.names == nil {
		u.names = make(map[string]string, 4)
	}
	u.names[placeholder] = attr
}

func (u *ddbUpdate) value(placeholder string, v int64) {
	if u.values == nil {
		u.values = make(map[string]types.AttributeValue, 6)
	}
	u.values[placeholder] = num(v)
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

// attrInt reads a number attribute; ok is false when it is absent.
func attrInt(item map[string]types.AttributeValue, name string) (int64, bool, error) {
	v, ok := item[name]
	if !ok {
		return 0, false, nil
	}
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false, errNotNumber(name, v)
	}
	n, err := strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		return 0, false, errBadNumber(name, err)
	}
	return n, true, nil
}

// denyNever fills the decision of a request that can never fit (cost above
// capacity): RetryAfter is the window, as kvbucket answers it.
func denyNever(d *edgelimit.Decision, window time.Duration) {
	d.RetryAfter = window
	d.Reset = max(d.Reset, window)
}
