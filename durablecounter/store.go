package durablecounter

import (
	"context"
	"strconv"
	"time"
)

// Store keeps the state of Counters: a *MemoryStore (in-process, the default
// for `edgelimit serve`) or a *DynamoStore (shared by every instance). Both
// have identical semantics; the conformance suite in package limitertest
// runs against each.
//
// Counters built on the same Store value can be decided together, all or
// nothing, by AllowBatch.
//
// Store is sealed: its methods are the storage operations the algorithms
// need, and they grow as algorithms are added, so only this package
// implements it.
type Store interface {
	// apply performs one operation.
	apply(ctx context.Context, now time.Time, o op) (result, error)
	// applyAll performs every operation or none: it commits only if every
	// condition holds. res[i] reports ops[i]; with committed false nothing
	// was applied and res[i].count is the count without this batch.
	applyAll(ctx context.Context, now time.Time, ops []op, res []result) (committed bool, err error)
	// refund undoes a successful add of o.delta, never below zero.
	refund(ctx context.Context, now time.Time, o op) error
	// batchKey identifies the store for edgelimit.BatchLimiter.
	batchKey() string
}

// itemID names one stored item. Its DynamoDB partition key is
// prefix + key + "#" + slot, e.g. "fw#paid-daily#<keyhash>#1700000000".
// The memory store uses the struct itself as its map key, so no string is
// built per decision.
type itemID struct {
	// prefix is "<algorithm>#<policy>#", built once per Counter.
	prefix string
	// key is the request's (hashed) client key.
	key string
	// slot distinguishes items of one key over time (the window start of a
	// fixed window); noSlot for algorithms with one item per key.
	slot int64
}

// noSlot marks an itemID whose partition key has no slot suffix.
const noSlot = -1 << 63

// pk returns the item's DynamoDB partition key.
func (id itemID) pk() string {
	b := make([]byte, 0, len(id.prefix)+len(id.key)+21)
	b = append(b, id.prefix...)
	b = append(b, id.key...)
	if id.slot != noSlot {
		b = append(b, '#')
		b = strconv.AppendInt(b, id.slot, 10)
	}
	return string(b)
}

// opKind says what an op does to its item. Algorithms that need other
// primitives add kinds here and implement them in every store.
type opKind uint8

const (
	// opAdd adds delta to the item's count if count+delta <= limit. An
	// absent or expired item counts as 0. A refund subtracts delta if the
	// count is at least delta.
	opAdd opKind = iota + 1
)

// op is one storage operation on one item.
type op struct {
	kind  opKind
	id    itemID
	delta int64
	// limit bounds the count after the add. limit < delta never succeeds,
	// whether or not the item exists.
	limit int64
	// end is when the item stops mattering (the end of its window); the
	// store keeps it until end plus its expiry margin.
	end time.Time
	// needOld asks the store, on a denial, for the count that denied it,
	// with a read if the server did not return it. Without needOld a
	// denial's count may be unknown.
	needOld bool
}

// result is the outcome of one op.
type result struct {
	// ok: the condition held (for applyAll: would have held; the op was
	// applied only if the batch committed).
	ok bool
	// known: count is valid.
	known bool
	// count is the item's count after the op when it was applied, else the
	// count the condition saw (0 for an absent or expired item).
	count int64
}
