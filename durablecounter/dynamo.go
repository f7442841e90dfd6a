package durablecounter

import (
	"fmt"
	"iter"
	"sync/atomic"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// Durable on DynamoDB: what decides one call, what a transaction needs and
// what a read-back decodes. It is all in terms of internal/wire (expression
// strings, attribute names, int64 values, items read through an accessor),
// so that only durablecounter/dynamostore links the SDK:
//
//	dynamo.go          the contract between the store and each algorithm
//	                   (encoding), and the store (dynamoStore) with its views
//	dynamo_ops.go      one operation on one item: a decision, a refund, a
//	                   charge, a grant, a reset, a read
//	dynamo_batch.go    several items at once: one transaction, or the
//	                   sequential fallback of a server without one
//	<algorithm>_item.go  each algorithm's item and conditional updates
//	                   (its rule, which decides, is in <algorithm>.go)
//	internal/wire      the SDK-free language; dynamostore converts it
//
// The rule decides; the encoding makes one conditional UpdateItem enforce
// that decision without a read before it, and says what a failed condition
// proves.

// encoding is how the DynamoDB store keeps one algorithm's state in an
// item. Its condition must never admit what the rule denies on the stored
// state, whatever this instance's view of the item. Every method is pure:
// it fills a condUpdate or reads an item, and sends nothing.
type encoding interface {
	// update fills u with the conditional UpdateItem that decides one
	// call: it spends cost at t if the stored state fits it, given view,
	// this instance's latest knowledge of the item (the zero state if
	// none). The condition must fail whenever the stored state does not
	// fit, whatever the view; it may also fail when the view is out of
	// date, and then the store decides again with the state the failure
	// returned. update sets u.at to the instant it decided at, and u.rc to
	// the receipt the write guarantees without its reply. What a
	// transaction needs: with u.tx set (the reply will carry no values)
	// update may add conditions that make that receipt exact. A request
	// that can never fit sets u.readOnly instead.
	update(view state, t, cost int64, margin time.Duration, u *condUpdate)
	// decode reads an item back (from ALL_NEW, ALL_OLD or a read) into the
	// rule's state; an empty item is the zero state, and so is an item
	// whose expires_at has passed where that matters (TTL is lazy).
	decode(item wire.Item, now int64) (state, error)
	// conditions says what update's condition proves, for reading its
	// failures.
	conditions() conditions
	// blind returns, for a failed condition that came without the old item
	// (dynalite ignores ALL_OLD), a lower bound of the state that proves
	// the denial without a read, if the failure alone proves it.
	blind(t, cost int64) (state, bool)
	// unknown is the decision when the state could not be read back (a
	// committed transaction whose read failed, an exact denial without
	// its item): nothing left, and the longest effective window the
	// algorithm can have.
	unknown(t, cost int64, allowed bool) edgelimit.Decision
	// refundUpdate fills u with the guarded update that undoes the
	// spending rc records, as of tr, or reports false when there is nothing
	// (left) to give back. seen is nil on the first attempt, else the state
	// of the item when the previous attempt's guard failed; attempt counts
	// from 1. The guard fails only when nothing is left to give back, or
	// (conditions().refundRaces) when a concurrent refund changed what is
	// left, and then the next attempt's update is computed from seen.
	refundUpdate(rc edgelimit.Receipt, seen *state, attempt int, tr, cost int64, u *condUpdate) bool
	// chargeUpdate fills u with the update that spends cost at t whether or
	// not it fits (Counter.Charge): no condition on the count, only those
	// that keep the item's structure right given view (the window a
	// sliding window writes, gcra's idle or busy form), which the store
	// retries with the state a failure returned. The rule's commit is its
	// memory twin.
	chargeUpdate(view state, t, cost int64, margin time.Duration, u *condUpdate)
}

// conditions is what an encoding's conditions prove.
type conditions struct {
	// exact: update's condition is exactly the rule's fits, so a failure
	// proves a denial and a read after it only fills the headers (the
	// fixed window, a grant). Otherwise a failure may also mean that the
	// view was out of date, and the state it returned decides.
	exact bool
	// usesView: update is built from this instance's last view of the
	// item, so the store keeps the last state it saw of each item.
	usesView bool
	// refundRaces: a refund's guard can fail for a concurrent refund, not
	// only when nothing is left to give back (gcra), so a failure is
	// followed by another attempt with the state it showed.
	refundRaces bool
}

// condUpdate is one conditional update (or one member of a transaction)
// as an encoding builds it: the update itself, SDK-free, and what the
// store needs to know about it.
type condUpdate struct {
	wire.Update
	// readOnly: the request can never fit (cost above the capacity); read
	// the state for the headers instead of writing.
	readOnly bool
	// tx: the update goes into a transaction, whose reply has no values.
	tx bool
	// at is the instant the update decides at; rc the receipt a successful
	// write guarantees without its reply.
	at int64
	rc edgelimit.Receipt
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

// dynamoStore is the Store on a table that every instance shares: the
// one-write protocol of the package documentation, over a wire.Conn
// (durablecounter/dynamostore's on the AWS SDK, which embeds it). It holds
// no SDK type: the encodings describe their conditional updates and read
// items back through wire's accessor, and the Conn converts.
//
// Of the servers' quirks, the Conn absorbs dynalite's ignored
// ReturnValuesOnConditionCheckFailure (it reads the item; see
// wire.ConditionFailed), and applyAll handles dynalite's missing
// TransactWriteItems.
type dynamoStore struct {
	conn   wire.Conn
	margin time.Duration
	mode   wire.TxMode
	// noTx: the server answered that it lacks TransactWriteItems.
	noTx atomic.Bool
	key  string
	// views is this instance's last view of each item, or nil.
	views *stateCache
}

func init() {
	wire.NewStore = func(cfg wire.Config) any { return newDynamoStore(cfg) }
}

func newDynamoStore(cfg wire.Config) *dynamoStore {
	s := &dynamoStore{conn: cfg.Conn, margin: cfg.ExpiryMargin, mode: cfg.Transactions}
	if cfg.ViewCacheSize > 0 {
		s.views = newStateCache(cfg.ViewCacheSize)
	}
	s.key = fmt.Sprintf("durablecounter/dynamodb/%s/%p", cfg.Name, s)
	return s
}

const (
	// maxAttempts bounds the conditional updates (or transactions) of one
	// decision: the first, and retries after a condition failed only
	// because this instance's view of the item was out of date, or a
	// transaction met another. The context (the engine's time budget)
	// bounds them first: a failure that a retry would resolve is retried
	// while the budget lasts, not reported as a store failure.
	maxAttempts = 32
	// maxRefundFailures bounds the retries of a refund whose call failed
	// (throttling, a dropped connection), within the context.
	maxRefundFailures = 8
	// maxReadRounds bounds BatchGetItem's rounds for unprocessed keys.
	maxReadRounds = 4
	// viewGrace keeps a view after its item stopped mattering: a sliding
	// log's count of expired units stays useful.
	viewGrace = 10 * time.Minute
)

func (s *dynamoStore) batchKey() string { return s.key }

// view returns this instance's last view of o's item, or the zero state.
func (s *dynamoStore) view(o *op) state {
	if s.views == nil || !o.enc.conditions().usesView {
		return state{}
	}
	st, _ := s.views.get(o.id, o.t)
	return st
}

// remember keeps st as the view of o's item.
func (s *dynamoStore) remember(o *op, st state) {
	if s.views == nil || !o.enc.conditions().usesView {
		return
	}
	s.views.put(o.id, st, o.t, max(o.rule.expiry(st, o.t), o.t)+int64(s.margin)+int64(viewGrace))
}

func (s *dynamoStore) forget(o *op) {
	if s.views != nil && o.enc.conditions().usesView {
		s.views.del(o.id)
	}
}

// update returns o's conditional update given view.
func (s *dynamoStore) update(o *op, view state, tx bool) condUpdate {
	u := condUpdate{tx: tx}
	o.enc.update(view, o.t, o.cost, s.margin, &u)
	// A failure that proves the denial by itself needs no old item.
	_, u.SkipOldRead = o.enc.blind(o.t, o.cost)
	return u
}

// wrap names the operation and item of a failed call, and marks
// throttling with ErrThrottled.
func (s *dynamoStore) wrap(what, pk string, err error) error {
	if s.conn.Throttled(err) {
		return fmt.Errorf("durablecounter: %s %q: %w: %w", what, pk, ErrThrottled, err)
	}
	return fmt.Errorf("durablecounter: %s %q: %w", what, pk, err)
}
