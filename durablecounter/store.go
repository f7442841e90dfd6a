package durablecounter

import (
	"context"
	"strconv"

	"github.com/edgelimit/edgelimit"
)

// Store keeps the state of Counters: a *Memory (in-process, the default
// for `edgelimit serve`) or a *dynamostore.Store (package
// durablecounter/dynamostore: a DynamoDB table shared by every instance).
// Both have identical semantics; the conformance suite in package
// limitertest runs against each.
//
// Counters built on the same Store value can be decided together, all or
// nothing, by AllowBatch.
//
// Store is sealed: its methods are the storage operations the algorithms
// need, in this package's unexported types, and they grow as algorithms
// are added, so only this package implements it. The DynamoDB store is
// this package's protocol too (the algorithms' conditional updates, their
// retries, batches and fallbacks, with no SDK type); dynamostore embeds it
// and only converts to the SDK and back (see internal/wire), which keeps
// the SDK out of every program that does not import dynamostore. Exporting
// the operations instead would freeze them and invite backends that cannot
// keep the exactness the conformance suite checks.
type Store interface {
	// apply decides one operation: it spends o.cost if it fits the item's
	// state at o.t, and reports the decision.
	apply(ctx context.Context, o op) (result, error)
	// applyAll decides every operation or none: it commits only if every
	// one fits. res[i] reports ops[i]; with committed false nothing was
	// spent, and a member that fits reports its state without the batch.
	applyAll(ctx context.Context, ops []op, res []result) (committed bool, err error)
	// refund undoes the spending rc records (of o.cost units, on o's item)
	// as of o.t, never below zero, retrying until it lands, proves that
	// nothing is left to give back, or ctx ends. It reports whether
	// anything was given back; an error means the refund did not land.
	refund(ctx context.Context, o op, rc edgelimit.Receipt) (bool, error)
	// get returns the state of o's item (the zero state if absent), read
	// consistently, without spending anything; read does that for several
	// items, filling out[i] for ops[i].
	get(ctx context.Context, o op) (state, error)
	read(ctx context.Context, ops []op, out []state) error
	// charge spends o.cost on o's item whether or not it fits (a charge
	// after the response, Counter.Charge), and reports the state after it
	// as a decision for one more unit.
	charge(ctx context.Context, o op) (result, error)
	// grant adds units, until end (Unix nanoseconds), to the grant item of
	// o (o.rule is the grant pool): a grant in force keeps its units and
	// lasts until the later end; an ended one is replaced. With units 0
	// (the policy's marker) it only raises the end.
	grant(ctx context.Context, o op, units, end int64) error
	// reset deletes the items of ops (Counter.Reset); deleting an absent
	// item is not an error.
	reset(ctx context.Context, ops []op) error
	// batchKey identifies the store for edgelimit.BatchLimiter.
	batchKey() string
}

// itemID names one stored item. Its DynamoDB partition key is
// prefix + key [+ "." + shard] [+ "#" + slot], e.g.
// "fw#paid-daily#<keyhash>#1700000000" or "gcra#burst#<keyhash>.3". The
// memory store and the caches use the struct itself as their map key, so no
// string is built per decision.
type itemID struct {
	// prefix is "<algorithm>#<policy>#", built once per Counter; pid is
	// its number in this process (prefixID), for the memory store's keys.
	prefix string
	pid    uint32
	// key is the request's (hashed) client key.
	key string
	// slot distinguishes items of one key over time (the window start of a
	// fixed window); noSlot for algorithms with one item per key.
	slot int64
	// shard is the item's shard of a policy with shards > 1, else noShard.
	shard int32
}

// noSlot marks an itemID whose partition key has no slot suffix.
const noSlot = -1 << 63

// noShard marks an itemID of a policy that is not sharded.
const noShard = -1

// pk returns the item's DynamoDB partition key.
func (id itemID) pk() string {
	b := make([]byte, 0, len(id.prefix)+len(id.key)+26)
	b = append(b, id.prefix...)
	b = append(b, id.key...)
	if id.shard != noShard {
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(id.shard), 10)
	}
	if id.slot != noSlot {
		b = append(b, '#')
		b = strconv.AppendInt(b, id.slot, 10)
	}
	return string(b)
}

// op is one request against one item.
type op struct {
	// rule decides it; enc is how the DynamoDB store writes it (the same
	// algorithm: the Memory store uses only rule).
	rule rule
	enc  encoding
	id   itemID
	cost int64
	// t is the decision time, Unix nanoseconds.
	t int64
}

// newOp returns the op of cost units on alg's item id at t.
func newOp(alg algorithm, id itemID, cost, t int64) op {
	return op{rule: alg, enc: alg, id: id, cost: cost, t: t}
}

// result is the outcome of one op.
type result struct {
	// ok: the request fits (for applyAll: would fit; it was spent only if
	// the batch committed).
	ok bool
	// known: st is valid. It is the state after the op when it was spent,
	// else the state that decided it. A denial's st may be a lower bound of
	// the stored state (see encoding.blind).
	known bool
	st    state
	// d is the decision, filled by the store.
	d edgelimit.Decision
	// rc is what an admission spent (ok, and spent: not for a member of a
	// batch that was not committed).
	rc edgelimit.Receipt
}
