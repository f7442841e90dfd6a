// Package durablecounter enforces exact rate limits with one conditional
// write per decision: however many Lambda instances and goroutines ask at
// once, a Counter admits at most its policy's limit per window, and denies
// nothing that fits. It is the `strategy: durable` of a policy file, for
// paid quotas, login attempts and anything billed.
//
// This version implements the fixed-window algorithm; New rejects other
// algorithms with ErrUnsupportedAlgorithm. Algorithms plug in as one file
// each (fixedwindow.go) over the same Counter and Stores.
//
// # Stores
//
// A Counter keeps its counts in a Store. A DynamoStore shares them through
// a DynamoDB table between every instance; a MemoryStore keeps them in the
// process (the embedded default of `edgelimit serve`, right for one
// process). Both have the same semantics and run the same conformance suite
// (package limitertest). Counters on one Store can be decided together, all
// or nothing (Counter.AllowBatch); the engine does that for the durable
// policies of a route.
//
// # Data model
//
// One table, partition key pk (string), TTL attribute expires_at (number,
// epoch seconds). Windows are aligned to the Unix epoch, so every instance
// agrees on them, and each key has one item per window:
//
//	pk         = fw#<policy>#<keyhash>#<window start>   (Unix seconds; Unix milliseconds for windows that are not whole seconds)
//	n          = cost units spent in the window
//	expires_at = window end + ExpiryMargin (default 1 minute), rounded up to a second
//
// Keys are the engine's keyed hashes, never raw addresses or API keys. A
// new window starts from zero without any reset write.
//
// # One write per decision
//
// A decision is one UpdateItem, with no read before it:
//
//	UpdateExpression    ADD n :cost SET expires_at = :exp
//	ConditionExpression attribute_not_exists(n) OR n <= :limit_minus_cost
//	ReturnValues        UPDATED_NEW     (n after the write: Remaining = limit - n)
//	ReturnValuesOnConditionCheckFailure ALL_OLD
//
// DynamoDB applies writes to one item one at a time, so two requests can
// never both take the last unit, and a request that fits is never denied:
// no version numbers, no retries, no read-then-write race. A denial is a
// ConditionalCheckFailedException; with ALL_OLD it carries the count that
// denied, which gives Remaining. Reset is the time to the window's end, and
// so is RetryAfter on a denial. A denial writes nothing. A request whose
// cost exceeds the limit uses the condition `n <= :limit_minus_cost` alone,
// which fails whether or not the item exists, so it too writes nothing; a
// policy with limit 0 is denied without a call.
//
// A refund (Counter.Refund, used by the engine when another policy on the
// route denies) is `ADD n :minus_cost` under `n >= :cost`, so a count never
// goes below zero. It applies to the window the clock is in: a refund
// issued in the milliseconds after a window boundary, for a request
// admitted before it, gives its cost to the new window (the one exception
// to "at most the limit per window", bounded by that cost). Batches need no
// refunds.
//
// Several policies on one request (Counter.AllowBatch) are one
// TransactWriteItems of the same updates, each with ALL_OLD. A cancelled
// transaction's CancellationReasons name every violated policy, and a
// BatchGetItem reads the counts the headers need (a transaction returns no
// values), so a batch costs two calls. A transaction cancelled only by
// conflicts with other transactions is retried up to three times within the
// engine's time budget.
//
// Measured by counting the SDK's HTTP requests (TestDynamoCallsPerDecision):
//
//	                                    moto                               dynalite
//	decision of cost 1, allowed/denied  1 UpdateItem                       1 UpdateItem
//	denial of cost > 1                  1 UpdateItem                       1 UpdateItem + 1 GetItem
//	refund                              1 UpdateItem                       1 UpdateItem
//	batch of 2, allowed                 TransactWriteItems + BatchGetItem  2 UpdateItem
//	batch of 2, denied by the second    TransactWriteItems + BatchGetItem  3 UpdateItem (one gives back)
//
// (dynalite's first batch also sends the TransactWriteItems that detects
// the missing transactions.)
//
// # Servers without the full API (dynalite)
//
// dynalite ignores ReturnValuesOnConditionCheckFailure: a denial arrives
// without the old item. With cost 1 that needs nothing more, since a denial
// means nothing is left (Remaining 0). With cost > 1 the remainder is
// unknown, and the Counter makes one strongly consistent GetItem, only then;
// should that read fail, the denial stands with Remaining 0. A read may see
// a refund made after the denial, so Remaining is capped at cost-1 to stay
// consistent with the denial.
//
// dynalite lacks TransactWriteItems. With TransactionsAuto (the default) a
// DynamoStore detects that from the first batch's UnknownOperationException
// and from then on commits batches sequentially: one conditional update per
// member; at the first denial, the members already spent are given back with
// a guarded decrement, and the remaining members are read to name every
// violated policy. That never over-admits, but it may deny a concurrent
// request to an already spent member spuriously until the compensation
// lands; see TransactionMode to force either protocol.
//
// # Expiry
//
// DynamoDB deletes expired items lazily (often days later), so readers
// treat an item whose expires_at has passed as absent. Writers never meet
// one: the window start is part of the key, and an instance only writes the
// item of the window its clock is in, which expires a margin after that
// window ends. The margin is the clock skew between instances the table
// tolerates before TTL could delete an item a lagging instance still counts
// in. Under skew each instance counts requests in the window of its own
// clock; a window's item never exceeds the limit, whichever instances
// wrote it.
//
// Changing a policy's window length reuses the item of a window that starts
// at the same second, carrying its count over: conservative (a few extra
// denials until the window ends), never an over-admission.
//
// The MemoryStore treats expired items as absent the same way and sweeps a
// shard when it has doubled in size since its last sweep, so memory stays
// within about twice the live items; MaxKeys bounds those, and a new key
// beyond it is refused with ErrStoreFull rather than evicting a live count.
// A decision on a key it holds allocates nothing.
//
// # Failures
//
// Allow returns an error only when the store failed (a timeout, throttling,
// an unreachable endpoint): the engine then applies the policy's
// on_store_error. Errors name the operation and item and wrap the SDK's
// error; throttling also wraps ErrThrottled. The context goes straight to
// the SDK, so the engine's time budget bounds every call, the SDK's own
// retries included.
package durablecounter
