// Package durablecounter enforces exact rate limits with one conditional
// write per decision: however many Lambda instances and goroutines ask at
// once, a Counter admits at most what its policy's algorithm allows, and
// denies nothing that fits. It is the `strategy: durable` of a policy file,
// for paid quotas, login attempts and anything billed.
//
// # Algorithms
//
// A policy's `algorithm:` picks one of four, each on both stores with
// identical semantics (package limitertest states them exactly and checks
// every backend against a reference model):
//
//   - fixed-window: at most limit units per window, windows aligned to the
//     Unix epoch. Allows 2x the limit around a boundary.
//   - sliding-window: Cloudflare's weighted two-window counter: the
//     current window's count plus the previous window's, weighted by how
//     much of it is still inside the last window. No boundary burst; an
//     approximation of the rolling window (see docs/durable.md for its
//     measured error).
//   - sliding-log: the exact rolling window, at millisecond resolution: the
//     units admitted less than a window ago, plus the request, are at most
//     the limit. Its item grows with the limit: at most MaxSlidingLogLimit
//     per shard.
//   - gcra: the generic cell rate algorithm, a token bucket of capacity
//     burst (default limit) refilling limit units per window, kept as one
//     theoretical arrival time. nginx limit_req with nodelay, whose burst
//     counts the requests beyond the first: burst B here is nginx's
//     burst=B-1.
//
// # What a decision says
//
// A Decision's Limit and Window are what the client is told in
// RateLimit-Policy (q, w): the policy's limit and window, and for gcra with
// a burst other than the limit, the burst over the time the bucket takes
// to fill (10/s with burst 20 is q=20, w=2s), so that Remaining, the units
// that would pass now, never exceeds Limit. Reset is draft-11's effective
// window t, the time within which the client can use no more than
// Remaining:
//
//   - fixed-window: until the window ends;
//   - sliding-window: until the estimate falls by one unit (the end of the
//     window when nothing is counted);
//   - sliding-log: until the oldest unit in the window leaves it (the whole
//     window when nothing is in it);
//   - gcra: until the next unit comes back into the bucket (for a full
//     bucket, one emission interval: the time a unit spent now takes to
//     come back).
//
// RetryAfter, on a denial, is the time until a request of the same cost
// would fit if nothing else arrived, never shorter than Reset. A request
// whose cost exceeds the limit (gcra: the burst) can never fit; it is denied
// with RetryAfter one window (or Reset, if longer). A policy with limit 0
// is denied without a store call. An allowed decision carries a Receipt:
// what it spent, for Counter.Refund (see Refunds).
//
// # Stores
//
// A Counter keeps its state in a Store. A dynamostore.Store (package
// durablecounter/dynamostore) shares it through a DynamoDB table between
// every instance; a Memory store keeps it in the process (the embedded
// default of `edgelimit serve`, right for one process). Counters on one
// Store can be decided together, all or nothing (Counter.AllowBatch); the
// engine does that for the durable policies of a route.
//
// Each algorithm is a rule, pure arithmetic on an item's state at an
// instant, which decides on both stores and in the caches, and an
// encoding, how the DynamoDB store keeps that state in an item and makes
// one conditional write enforce the rule. This package links no AWS SDK:
// the encodings describe their conditional updates as expression strings,
// attribute names and numbers, and read items back through an accessor;
// the DynamoDB protocol (one write, retries on an out-of-date view,
// transactions, the sequential fallback, views, refunds, peeks) is here
// too, in those terms. Only dynamostore converts them to the SDK's types
// and sends them, so a program that keeps its counts in memory (or uses
// only middleware, pow or signedwindow) does not link the SDK.
//
// # Data model and the one write
//
// One table, partition key pk (string), TTL attribute expires_at (number,
// epoch seconds). Keys are the engine's keyed hashes, never raw addresses
// or API keys. Every decision is one UpdateItem, with no read before it,
// whose condition holds exactly when the request fits the stored state
// (or, for the algorithms that need this instance's last view of the item,
// when it fits and the view is not out of date in a way that matters):
//
//	fixed-window    fw#<policy>#<key>#<window start>  n, g (the item's incarnation)
//	    ADD n :cost SET expires_at = :e, g = if_not_exists(g, :new_g)
//	    if attribute_not_exists(n) OR n <= :limit_minus_cost
//	sliding-window  sw#<policy>#<key>                 w (newest window index), c<i> (count of window i), a, g
//	    ADD c<i> :cost SET w = :i, a = :te, g = if_not_exists(g, :new_g), expires_at = :e [REMOVE c<j>, j < i-1]
//	    if (attribute_not_exists(w) OR w <= :i) AND (attribute_not_exists(c<i>) OR c<i> <= :m)
//	       AND (attribute_not_exists(c<i-1>) OR c<i-1> <= :cached_prev)
//	sliding-log     sl#<policy>#<key>                 b<ms> (units of that millisecond), n, x, g, r
//	    ADD n :cost, b<ms> :cost SET g = if_not_exists(g, :new_g), expires_at = :e
//	    if attribute_not_exists(n) OR (n <= :limit_minus_cost_plus_expired
//	       [AND g = :g when expired units are counted] [AND r = :r when expired buckets are])
//	gcra            gcra#<policy>#<key>               tat (Unix nanoseconds), a, p, z
//	    idle: SET tat = :te_plus_cost_T, a = :te, p = :new REMOVE z
//	          if (attribute_not_exists(tat) OR tat <= :te) AND (attribute_not_exists(a) OR a <= :te)
//	    busy: SET tat = tat + :cost_T, a = :te   if tat > :te AND tat <= :te_plus_burst_minus_cost_T
//
// (Attribute names go through ExpressionAttributeNames; a is the instant
// the writer decided at, :te, see Clock skew; gcra's p and z serve
// refunds; g names an item's life, see Quotas. A window other than the
// policy's, a tier's or an override's, counts in items of its own,
// fw#<policy>/<window ms>#..., and a key's grants are in grant# items. A
// calendar period's window start is the period's start instant in seconds,
// and a period other than the policy's adds its tag, fw#<policy>/<window
// ms>/month.15@UTC#...; see period.go.)
// DynamoDB applies
// writes to one item one at a time, so two requests can never both take
// the last unit, and concurrent requests on one key do not conflict: ADD
// commutes, and so does gcra's busy update. No version numbers, no
// read-then-write race. Where DynamoDB's conditions cannot compute the
// algorithm (no multiplication, no sums, no max), the Counter computes the
// bound from its view of the item and the condition checks that the item
// is not beyond the view: the sliding window's weight applies to the
// previous window's count, which is final once the item has moved past it
// and so stays cached for a whole window; the sliding log's count of
// expired units only grows; gcra's idle/busy choice is checked by its
// condition. The file of each algorithm details why its condition never
// admits what the stored state does not allow.
//
// A denial is a ConditionalCheckFailedException. With
// ReturnValuesOnConditionCheckFailure=ALL_OLD it carries the item that
// denied, from which the Decision's Remaining, Reset and RetryAfter are
// computed without a second call. If the state returned shows that the
// request fits (the instance's view was out of date: another instance
// wrote since), the Counter sends the update again with that state: a
// failed condition is a denial only when the state denies. Successful
// writes return the item (UPDATED_NEW, or ALL_NEW where the view needs it),
// which refreshes the view. MaxSlidingLogLimit bounds the sliding log's
// item (about 11 bytes per millisecond with admissions in the window: 220
// KB at the largest limit, and a write costs one write unit per KB of item,
// denials included).
//
// Measured by counting the SDK's HTTP requests (TestDynamoCallsPerDecision;
// the numbers and the read-then-write baseline are in docs/durable.md):
// every algorithm decides an allowed request and the first denial an
// instance meets with one UpdateItem (dynalite: a denial of the sliding
// window, log or gcra adds one GetItem, see below); repeat denials, and the
// request after an instance's own admission took the last unit, with none,
// from the deny cache.
// An instance's first decision on an item whose state another instance
// changed in a way its view cannot bound costs a second UpdateItem: for the
// sliding window once per window and instance, for the sliding log when the
// instance has not seen the item for a window, for gcra when the key went
// from idle to busy or back since the instance last saw it.
//
// # Servers without the full API (dynalite)
//
// dynalite ignores ReturnValuesOnConditionCheckFailure: a failure arrives
// without the old item. A fixed window of cost 1 needs nothing more (a
// denial means nothing is left). Otherwise the store makes one strongly
// consistent GetItem, only then. Should that read fail, a fixed window's
// denial stands with Remaining 0 (its condition is exact); the other
// algorithms, whose condition may also have failed for an out-of-date view,
// return the error, and the engine applies on_store_error.
//
// dynalite lacks TransactWriteItems. With TransactionsAuto (the default) a
// dynamostore.Store detects that from the first batch's UnknownOperationException
// and from then on commits batches sequentially: one conditional update per
// member; at the first denial, the members already spent are refunded by
// their receipts (exactly what each spent), and the remaining members are
// read to name every violated policy. That never over-admits, but it may
// deny a concurrent request to an already spent member spuriously until the
// compensation lands. A compensation is retried until it lands or the
// context ends, and one that cannot land fails AllowBatch with its error
// (TestSequentialBatchRefundsEveryUnit: 150 concurrent batches, every unit
// comes back); see dynamostore.TransactionMode to force either protocol.
//
// # Several policies on one request
//
// Counters of any algorithms on one Store are decided together by
// AllowBatch: one TransactWriteItems of the members' updates, each with
// ALL_OLD, all or nothing. A cancelled transaction's CancellationReasons
// name every violated policy (a member whose condition failed only for an
// out-of-date view is retried, not reported), and a BatchGetItem reads the
// states the headers need (a transaction returns no values): two calls. A
// transaction cancelled although every member fits (its condition failed
// only for an out-of-date view, or another transaction held its item) is
// sent again with the views the cancellation corrected: one retry decision
// for both causes, within the engine's time budget and at most 32
// transactions, then ErrContention.
//
// # Deny cache
//
// With the policy's deny_cache (the default of a policy file), a Counter
// keeps, per instance, the state that denied each key, or that an
// admission left with nothing remaining: a lower bound of the stored state,
// which only grows (until a refund or a reset). A later request that
// this state certainly denies, at its own cost and time and under the
// limits in force for it, is answered from it without a store call; one
// that might fit (a smaller cost, after time freed units, a raised limit)
// goes to the store. The cache never admits anything. An entry answers
// until the denial's retry time and at most DenyCacheMaxAge (1 s) after
// the store's answer it holds: during a flood from one client, store calls
// approach one per key per second per instance. A batch is answered from
// the cache when one member's cached state denies it and every member's
// state is cached (the store returns them all with a denial). What other
// instances did since (a refund, an operator's reset or grant) is not
// seen until the entry expires: the one case where the cache denies what
// the store would admit, for at most DenyCacheMaxAge. DenyCacheSize bounds
// it.
//
// # Quotas: the limits in force, reset, grant, charge
//
// A Request's Limits (a tier's, an override's; zero fields keep the
// policy's) replace the policy's limit, window and gcra burst for that
// request; gcra's burst follows the limit in force when the policy's is its
// limit (the default). Decisions tell the numbers in force. A key whose
// limits change keeps what it spent: a new limit applies to the fixed
// window's count, the sliding window's estimate, the sliding log's units;
// gcra keeps its TAT and reads it with the new emission interval (with the
// burst following the limit the tolerance is one window, so the share of
// the bucket used stays the same: bucket4j's PROPORTIONALLY for a rate,
// ADDITIVE for a burst). A window other than the policy's counts in items
// of its own, from nothing the first time (bucket4j's RESET: a count means
// nothing under another window), which keeps every item written under one
// window, with one expiry. Every decision is the algorithm's rule under the
// limits it was decided with, on the stored state; instances that still
// read an old override decide by its limits, never more than them. Limits
// a policy cannot enforce fail with ErrLimits.
//
// Counter.Reset deletes every item of a key (every shard; the policy's
// window, each tier's, the override's, the current and previous fixed
// window). Items carry their incarnation (g; gcra's period), so that a
// refund of a spending from before the reset gives nothing to the count
// after it. Counter.Grant gives a key units beyond its quota, in a grant#
// item of its own that a request the quota denies is paid from (one more
// conditional update, exact); only policies with overrides: true take
// grants, and their keys without one pay one read of the policy's grant
// marker per DenyCacheMaxAge per instance on the way to a denial.
// Counter.Charge spends whether or not the units fit (a cost known after
// the response): the key goes over its limit once and is denied until its
// window frees what was over-spent. docs/durable.md details each.
//
// # Peek
//
// Counter.Peek reports whether a request would be allowed, and the
// policy's state, without spending anything (edgelimit.Peeker: the engine
// peeks at a route's other policies once one has denied, so that a 429 names
// every violated policy). A denial it reports is real. It answers from the
// deny cache only where the cached state proves the denial: no store call.
// Otherwise it makes one consistent read (GetItem; a sharded policy reads
// its shards with one BatchGetItem) and remembers what the read showed in
// the deny cache, as a lower bound, so that repeat peeks (and requests) of a
// key it shows denied cost no call until the key could fit. No cache can
// prove that something fits, so a peek that finds room answers from the read
// it made for PeekFreshness (1 s) and then reads again: a flood that another
// policy denies costs at most one read per key per second per instance, and
// the room a 429 shows may miss up to a second of other instances' spending
// (TestDynamoCallsPerPeek). This instance's own spending, refunds and resets
// always show, in peeks and in the deny cache: a read that one of them
// overtook (it landed after the read, before its answer was remembered) is
// not remembered (TestPeekShowsAnAdmissionDuringItsRead,
// TestDenialShowsARefundDuringItsCall).
//
// # Hot keys: shards
//
// DynamoDB serves about 1,000 writes a second per partition; a `global`
// policy on a busy route concentrates every write on one item. `shards: N`
// spreads each key over N items, pk suffix ".<shard>", each with its share
// of the limit (and of gcra's burst). A request goes to a random shard and,
// if that one denies, to the others in turn (the deny cache skips those it
// knows are full), so the policy still admits exactly its limit and denies
// only when every shard is full. Remaining is a conservative bound of the
// whole policy's that reads 0 only when the policy has nothing left: the
// answering shard's, and when an admission leaves that shard with nothing,
// what every other shard has left (one read of them, one BatchGetItem, only
// then; Reset is then the soonest a unit comes back in any shard). A denial
// reports the most any shard has left (less than the cost). The trade-off:
// a request must fit one shard's share (cost <= limit/N), Remaining may be
// lower than the policy's, a first denial costs up to N calls, and an
// admission that empties its shard one read. A refund goes back to the shard
// its decision spent in (the Receipt names it). Each shard of a sliding-log
// may hold MaxSlidingLogLimit units.
//
// # Clock skew
//
// Lambda instances' clocks differ, and even one instance's concurrent
// requests reach the store in another order than they read the clock. A
// request is decided at the later of its own instant and the latest
// instant its item records of its writers (the sliding window's and gcra's
// a, the sliding log's newest millisecond), never earlier: otherwise a
// request a moment behind the item's last writer would be denied by that
// moment although it fits (issue #10: two requests reaching an idle gcra
// key at once admitted one of two; TestTwoClocksOneMillisecondApart,
// TestNoSpuriousDenialOfFirstRequests: no spurious denial of concurrent
// first requests, on every store and algorithm). Every rule only loosens
// as time passes, so a decision at a later instant that some writer really
// reached never admits what the rule at the latest clock denies. (On
// DynamoDB, a writer with a stale view may record a slightly earlier
// instant than one already recorded, and a request is then decided as if
// at that instant, by at most that gap. The fixed window counts each
// request in the window of its own clock: its windows are separate items.)
// No instance can make the stored state admit more than the limit by its
// algorithm's own rule, evaluated at the latest clock (TestClockSkew, two
// clocks 2 s apart):
//
//   - fixed-window: each instance counts in the window of its own clock;
//     each window's item holds at most the limit, whoever wrote it. Around a
//     boundary a lagging instance adds to the window the others left (see
//     below for what that lets pass at once).
//   - sliding-window: the item records its newest window and the instant
//     of its latest writer, and no instance writes an older window: a
//     lagging instance is decided at that instant.
//   - sliding-log: units carry the instant they were decided at, and a
//     unit stamped ahead of a reader's clock counts as in its window: a
//     lagging instance sees every unit the others admitted, is decided at
//     the item's newest millisecond, and stamps its units there. Every
//     window-long interval of the log holds at most the limit.
//   - gcra: the TAT only grows; a lagging instance is decided at the
//     instant of the item's latest writer, and an idle write never sets the
//     TAT behind an instant already recorded. The TAT never gets more than
//     the tolerance ahead of the latest clock.
//
// Measured in real time, instances s apart count time from different
// origins: for the sliding window, the sliding log and gcra, up to
// (s / window) * limit units more may pass in a real-time window (gcra:
// s / T), never more per the stored state. The fixed window's bound is its
// boundary effect, which skew makes reachable at once: for the s after each
// window boundary of the leading clock, an instance s behind still counts
// in the previous window, a separate item, so concurrent requests then may
// pass up to the limit in each of the two windows, twice the limit at once
// and in a window of any instance's clock (TestClockSkewBurst: clocks 2 s
// apart, 12 per 4 s, 32 requests at once 300 ms into a window: at most 24
// admitted, and at most 18 for the others; on one clock exactly 12). A
// lagging writer cannot adopt the leader's window within its one write: it
// never sees that window's item. Where clocks may differ by a noticeable
// part of the window, use the sliding window. The table's TTL tolerates
// skew up to ExpiryMargin.
//
// # Expiry
//
// DynamoDB deletes expired items lazily (often days later), so readers
// treat an item whose expires_at has passed as absent; for the sliding
// window, log and gcra an expired item already decides exactly as an
// absent one. expires_at is when the item stops mattering (the end of a
// fixed window, a sliding window's next window, the log's newest unit plus
// a window, gcra's TAT), plus ExpiryMargin, rounded up to a second.
//
// The Memory store treats expired items as absent the same way and sweeps a
// shard when it has doubled in size since its last sweep, so memory stays
// within about twice the live items; MaxKeys bounds those, and a new key
// beyond it is refused with ErrStoreFull rather than evicting a live count.
// A decision on a key it holds allocates nothing (a sliding log's, when its
// millisecond buckets grow, does).
//
// # Failures
//
// Allow returns an error only when the store failed (a timeout, throttling,
// an unreachable endpoint): the engine then applies the policy's
// on_store_error, and logs and counts it. The context goes straight to the
// SDK, so the engine's time budget (store_timeout, default 100 ms) bounds
// every call, the SDK's own retries included; the store caps the SDK's
// retry back-off (dynamostore.Config.RetryBackoff) so that they fit the budget.
// The Counter retries nothing but conditional updates whose failure showed
// an out-of-date view: while the context lasts (the engine's budget) and at
// most 32 in all, then gives up with ErrContention. A failure that another
// attempt would resolve is retried, not reported as a store failure.
// Errors name the operation and item and wrap the SDK's error; throttling
// (ProvisionedThroughputExceeded, ThrottlingException, RequestLimitExceeded)
// also wraps ErrThrottled.
//
// # Refunds
//
// Counter.Refund undoes what an allowed decision spent, by the decision's
// Receipt (its instant, its shard, and what its algorithm needs), as the
// engine does when a later policy on the route denies the request: on the
// same item, as of the later of the decision's instant and the refund's,
// never below zero:
//
//   - fixed-window: the count of the decision's window; a refund after that
//     window ended gives nothing (nothing to the new window);
//   - sliding-window: the count of the decision's window, while it weighs
//     (until the end of the next window), never a later window's;
//   - sliding-log: the millisecond the decision's units were stamped with,
//     while it is in the window (not the oldest units);
//   - gcra: the decision occupied a slot of the emission schedule that the
//     TAT ends, and its units come back as time passes the slot; the refund
//     removes what of the slot is still to come (all of it as of the
//     decision's instant, the engine's case). Refunds of earlier slots move
//     the later ones forward; a refund bounds where its slot is now by the
//     refunds made since (the item's z) and takes only what certainly is
//     still to come, guarded so that a concurrent refund makes it look again
//     (at most 4 guarded attempts, then what the decision's instant alone
//     proves). Nothing once the bucket has been full since (a new period, p).
//
// A decision without a Receipt (a denial, a peek, a member of a batch that
// was not committed) spent nothing and refunds nothing. A decision a grant
// paid refunds to the grant. A refund finds nothing to give back in an
// item reset since (another incarnation). A refund's guard
// fails only when nothing is left to give back (or, gcra, when a concurrent
// refund changed what is), so refunds never contend with admissions. A
// refund whose call fails is retried until it lands or the context ends, and
// is then returned as an error, never dropped. Batches need no refunds
// (except the sequential fallback's compensation, above).
package durablecounter
