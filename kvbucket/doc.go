// Package kvbucket is the kv strategy: a token bucket per key in a shared
// KV, with an in-process cache in front. It is for endpoints where "about
// 60 per minute" is good enough and latency matters more than the exact
// count (contact forms, search, soft throttles); use durablecounter where
// every unit is billed.
//
// # Model
//
// A bucket holds at most B = Policy.Capacity() tokens (burst, default
// limit) and refills r = Limit/Window tokens per second, continuously. Its
// state is a theoretical arrival time, TAT (the GCRA's), in bucket units:
// an instant of n nanoseconds is n·Limit units and a token is Window units
// (a 128-bit integer), so refill is exact integer arithmetic. The bucket at n
// holds n·Limit + B·Window − max(TAT, n·Limit) units; a spend of c tokens
// at n is TAT ← max(TAT, n·Limit) + c·Window, allowed when the bucket holds
// c tokens; a denial spends nothing. A TAT in the past is a full bucket, so
// refill is never written, an idle bucket costs nothing, and a missing
// state is a full bucket. [Params] is the pure token bucket with the
// instant passed in ([Params.TakeAt], [Bucket.AllowAt]); the Bucket
// decides exactly as it does for a single client, but for a clock going
// backwards (below) and sub-nanotoken roundings of a refill that is not a
// whole number of units per step. (Params has no max_delay: a Bucket's
// policy gives it.)
//
// With max_delay D (Policy.MaxDelay) a request the bucket will hold room
// for within D is allowed for its turn: its tokens are spent at once, the
// bucket going below empty by at most D·Limit units (r·D tokens), and
// Decision.Delay is the time until the bucket, with the request in it, is
// back within its capacity; the engine holds the request that long. Its
// Receipt's At is that turn, so a refund before it (a wait cut short)
// gives every token back. A share holds its part of the turns as it holds
// its part of the refill: one instance alone hands out each turn once,
// and across instances the waits add r·D to the over-admission bound.
//
// A Decision tells the client (through the engine's RateLimit headers):
//
//   - Limit and Window (RateLimit-Policy q and w): the capacity over the
//     time the bucket takes to fill from empty ([Params.Advertised]): 10 per
//     second with a burst of 20 is 20 per 2s, so Remaining never exceeds
//     Limit.
//   - Remaining (r): the whole tokens left, as this instance may spend them
//     (the bucket's, or its share's if that is less: see below).
//   - Reset (t): draft-11's effective window, the time within which the
//     client can use no more than Remaining, which for a bucket is the time
//     until the next whole token comes back ([Params.NextToken]); for a full
//     bucket, one emission interval (Window/Limit, the time one token takes
//     to come back after a spend). It is not the time until the bucket is
//     full.
//   - RetryAfter (denials only): the time until the request's cost is
//     there, never shorter than Reset. A cost above the capacity is denied
//     with RetryAfter one Window.
//
// An allowed Decision carries a Receipt of what it spent (the instant, the
// tokens, and this Bucket and key): [Bucket.Refund] gives back what of
// those tokens refill has not brought back since, c − (r − s)·Limit/Window
// for c tokens spent at s and refunded at r (all of them at the spend's own
// instant, which is when the engine refunds; nothing once they have come
// back), never beyond capacity (in the KV, minus those units added to what
// this instance's region spent), and refuses a receipt that is not its own
// ([ErrReceipt]). A spend's effect on what a bucket holds decays at most at
// the refill rate, so a refund never gives back more than its decision
// took, whatever happened since (limitertest.TokenBucket's refund, which
// kv's conformance test runs). [Bucket.Peek] answers whether a
// request would be allowed, and the state, without spending or writing:
// from the local state when Allow would decide from it, else from one KV
// read. Allow, Refund and Peek decide at [edgelimit.Request.At] unless the
// Bucket has its own clock (Config.Now), and at time.Now when neither is
// set.
//
// # A request's own limits: tiers and overrides
//
// A Request whose Limits are set (the tier its plan chose, an override an
// operator set for its key) is decided under them instead of the policy's:
// Limit, Window and Burst where they are set, the policy's where they are
// zero (a zero Burst: the policy's burst, else the limit in force), and
// the Decision tells the client their quota (q, w). The bucket is the
// same: a change of limits under live state keeps its TAT, the instant it
// is full again, and reads it under the request's rate and capacity. Under
// (L', W', B') at n the bucket holds
//
//	B' − (TAT − n)·L'/W'   tokens, at most B'
//
// so a key spent halfway under 10 a minute (30s to full) holds half of a
// tier of 100 a minute whose bucket also fills in a minute, and a key
// lowered to a bucket that fills faster than its debt waits that debt out
// (it is full again at the same instant). It is the one choice that needs
// no conversion write: instances that see a change at different moments
// (an override reaches each within its staleness) keep adding to the same
// TAT, commutatively. Other choices (bucket4j's: keep the tokens, scale
// them, reset them) would each need a read-modify-write of the shared
// state at the change, raced by the others' additions. The TAT is kept in
// the policy's scale (an instant is n·Limit units); a token of other
// limits is ⌈W'·Limit/L'⌉ units, exact when L' divides W'·Limit and at
// most one unit (1/Limit ns of refill) more otherwise. Limits whose token
// is beyond 2^63 units, or outside Params.Validate's range, are an
// ErrConfig error. A policy of limit 0 admits only requests whose limits
// give a limit.
//
// # Operators: Reset, Grant and Charge
//
// [Bucket.Reset] makes a key's bucket full again from the request's instant
// for every instance that reads it afterwards: it lowers this region's part
// (its TAT, and across regions what it counts as spent) so that no term of
// the bucket's TAT passes the instant. Everything written after it counts;
// this instance's unwritten spending from before is forgotten. Another
// instance learns of it within one sync interval (its share ends; a denial
// whose knowledge of the KV is a sync interval old is read again first), and
// the spending it had not written yet, at most one sync interval's, counts
// against the full bucket; so does another region's spending still
// replicating.
//
// [Bucket.Grant] gives a key tokens beyond its capacity until an end (by
// default one fill time). The grant is two fields of this region's part,
// read with the key's state; each request it pays for (once the bucket
// cannot) is a conditional update that takes its cost only if the grant
// still holds it, so no token of a grant is spent twice across instances.
// The granting instance honours it at once, others within a sync interval;
// a grant is spent only in the region that made it.
//
// [Bucket.Charge] spends a cost known after the response whether or not it
// fits: the bucket may go into debt, by at most one bucket (a TAT further
// ahead would be taken for a clock far ahead), and requests are denied
// until refill repays it. It is spent as an admission is: approximate
// across instances like every kv spend.
//
// # The store: merge instead of overwrite
//
// A [KV] holds the TAT of a bucket and changes it only by commutative
// updates: raise it to a floor (when it is below: the bucket had
// refilled completely) and add to it. Concurrent instances' spending adds
// up instead of the last writer's copy replacing the others'. On DynamoDB
// (package kvbucket/dynamostore, which holds the AWS SDK: this package
// links none of it) an update is one UpdateItem: an ADD, which needs no condition, in the
// common case; after an idle period a SET of the TAT to its floor under the
// condition that it is below it; the item's answer (ReturnValues ALL_NEW)
// is the bucket's fresh state, written by everyone, so a sync needs no
// read. A reservation is the same update under the condition that it fits;
// one that does not fit changes nothing. An instance's local changes
// between writes (spends, refunds, an undone reservation) compose into one
// update in the max-plus algebra, tat ← max(tat, F) + P, so a sync writes
// them all at once. [Memory] applies the same updates in process.
//
// Across regions (a DynamoDB Global Table, replicated last writer wins per
// item), each region writes only its own part of a bucket
// (dynamostore.Config.Region: an item "…@<region>") and reads the others' parts
// from its replica: the bucket's TAT is
//
//	max over regions q of (TAT_q + Window·(tokens spent by every region but q))
//
// where each region raises its TAT_q to a floor less the others' spending
// it knows. Replication then never has two regions' writes of one item to
// choose between, and no region's spending is lost; a region sees the
// others' one replication lag δ late.
//
// # The cache: reservations first, then a share
//
// Each process (each Lambda instance) keeps a bounded local state per key
// ([Config.CacheSize]). A key it holds no state for (new to it, or dropped
// from the cache) is read strongly consistent first: an eventually
// consistent read just after this instance's own write could return an
// older, fuller state.
//
// During a key's first sync interval S in an instance (policy
// sync_interval, default 1s), the instance cannot know how many others spend
// the key, so each admission is a reservation in the KV, one at a time per
// key per instance (concurrent requests wait for the one in flight and are
// then decided from its answer, usually denied without a call once the
// bucket is empty). That is what makes a cold burst over many instances
// exact.
//
// After it, the first request of each sync interval syncs: one
// unconditional update writes what the instance spent locally since its last
// write with the request's own spend, and its answer decides the request
// (when it did not fit after all, its spend is undone with the next write)
// and grants the instance a share of the bucket until the next sync:
//
//	share(t) = (R + r·(t − g)) / n
//
// where g is the sync's instant, R what the bucket held after it, and n the
// instances that wrote the key in the current or the previous sync interval
// (each registers in the item's writer set of its epoch with every write).
// Requests until the next sync are decided locally, with no KV call, within
// both the share and the local state; beyond the share a request is denied
// until the share grows (Reset and RetryAfter count in it) or the next sync.
// An instance that is the only writer (n = 1) has the whole bucket: it is
// exactly a token bucket. Writes of an instance are at most one per key per
// S, but for the reservations of a key's first interval and the write-back
// at eviction. [Config.NoCache] makes every admission a reservation.
//
// The local state can only overstate what the bucket holds (other
// instances only add to it), so a denial it proves is one the KV would give:
// it costs no call. The exception is an operator's [Bucket.Reset] or
// [Bucket.Grant] on another instance, which gives the bucket tokens this
// instance does not know of: a denial whose knowledge of the KV (the last
// answer for the key) is a sync interval old or more is read again first
// (one strong read), and the fresh state decides. So a denied key costs at
// most one read per S per instance, and a Reset or Grant anywhere reaches
// every instance within S; a failed re-read keeps the denial and is not
// tried again for S. What is in flight (a reservation, a sync's own write)
// counts as spent locally until its answer comes; answers of concurrent
// calls are ordered by the part's version (a counter every update of the
// part raises).
//
// Eviction never loses spending. Beyond CacheSize a least recently used key
// is dropped (sampled LRU). A key whose changes the KV knows is just
// dropped; one with unwritten changes is first written back (one update, by
// the request that needed the room, after that request's own decision) and
// dropped once written; if the write fails the key stays, dirty, for a later
// eviction. Stats.Flushed counts the write-backs.
//
// # Accuracy: the over-admission bound
//
// Let C be the instances deciding one key, S the sync interval, and T any
// period. In one region:
//
//	admitted(T) ≤ B + r·T + E,   E = (B + r·S) · Σ_i 1/n_i  ≤  H_C · (B + r·S)
//
// where the sum is over the shares outstanding at one moment, n_i being the
// instances share i was divided by, and H_C = 1 + 1/2 + … + 1/C the C-th
// harmonic number. In the steady state, where every instance holding a
// share has written within the sync interval before every other's grant,
// each n_i counts all of them and Σ 1/n_i ≤ 1: E ≤ B + r·S, one extra
// bucket and one sync interval's refill, however long T is. One instance
// alone is exactly the bucket (E = 0, and it admits no fewer). A burst of
// any number of instances on a cold key is exactly the bucket: every
// admission is a reservation. Before (issue #14), each instance decided
// from its own copy and the KV kept the last blind write, so instances
// overwrote each other's spending instead of adding to it, and the bound was
// C·⌊B + r·T⌋, growing with T.
//
// Proof. Every admission is (a) a reservation (or a sync's own spend),
// applied atomically by the KV, or (b) a local spend out of a share. (1) The
// KV's TAT is never less than the GCRA of the spends it holds taken in time
// order: it applies each update with its floor in arrival order, and a
// spend applied after one that happened later is charged no less than in
// time order (max-plus maps are monotone). (2) Count each share as spent in
// full at its grant g: a virtual stream V that every actual local spend
// stays within. A reservation is allowed only if the KV's TAT with it stays
// within the limit; a share is at most 1/n of what the KV's state left, plus
// its refill until the next sync. The KV's state lacks only the spending of
// the other outstanding shares (and, with regions, of the others' last δ +
// S). So each element of V leaves the GCRA of V within the limit plus E.
// (3) A stream whose GCRA stays within the limit plus E admits at most
// B + r·(t − s) + E in any interval (s, t] (the GCRA's TAT after the stream
// is at least s·Limit plus Window times the tokens spent in it). Hence the
// bound. For Σ 1/n_i ≤ H_C: order the shares outstanding at a moment by
// grant; each was granted within S of the later ones, and every grant is a
// write registered in its epoch, so the k-th counts the k − 1 before it:
// n_k ≥ k.
//
// Across R regions with replication lag δ, each region additionally misses
// what every other region spent in its last δ + S, which by the same bound
// is at most B + r·(δ + S) + E per region:
//
//	admitted(T) ≤ B + r·T + R·E + (R − 1)·(B + r·(δ + S))
//
// In words: regions that meet a full bucket at once can each spend it (a
// cold burst gets a bucket per region); after that, what another region
// spends within a replication lag. The spending of every region adds up in
// the end, so the excess does not grow with T. (The one exception: when a
// region's part of an idle key expires and is deleted, its spending
// vanishes from the sum: a bucket that another region had spent can come
// back full once, at most B. Parts of a multi-region table are therefore
// kept a day at least.)
//
// docs/kvbucket.md has the measured numbers, with separate processes.
//
// # Failure modes
//
// The engine sets the time budget of a decision in ctx (store_timeout,
// default 100ms); ctx goes straight to the SDK. dynamostore caps the SDK's
// back-off between retries (its Config.RetryBackoff, default 10 ms, as
// durablecounter does), so that a throttled call gives up after the
// client's attempts (4 for DynamoDB by default: 3 back-offs, 30 ms) well
// inside the budget, instead of waiting it out. A KV error is returned
// with context (the engine applies on_store_error, fail open by default for
// this strategy, logs and counts it), and the failed call spent nothing. A
// failed call of a key this process knows counts as that interval's
// attempt: the key is decided locally (as if this instance were alone)
// until a sync interval has passed, so a broken KV costs one error per key
// per S per instance, not one timeout per request. A failed write-back of
// an evicted key keeps it in the cache. Whatever a KV returns is clamped
// into range; nothing panics.
//
// Clocks: a TAT written by an instance whose clock runs ahead counts as
// spending until the others' clocks catch up (they wait, rather than spend
// the tokens that instance had left); this region's part more than
// [MaxClockSkew] beyond a bucket spent empty twice over is repaired to an
// empty bucket at the reader's instant, so one bad clock cannot freeze a
// bucket. Sentinel errors: [ErrConfig], [ErrBadKey], [ErrBadItem],
// [ErrReceipt], [ErrThrottled], [ErrGrant].
package kvbucket
