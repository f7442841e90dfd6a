// Package kvbucket is the kv strategy: a token bucket per key over an
// eventually consistent KV, with an in-process cache in front. It is for
// endpoints where "about 60 per minute" is good enough and latency matters
// more than the exact count (contact forms, search, soft throttles); use
// durablecounter where every unit is billed.
//
// # Model
//
// A bucket holds at most B = Policy.Capacity() tokens (burst, default
// limit) and refills r = Limit/Window tokens per second, continuously. Its
// state is two numbers, the tokens it held and when ([State]); refill is
// computed when the state is read, so an idle bucket costs nothing and a
// write happens only on a request. Tokens are counted in nanotokens
// ([TokenScale] per token), so refill is exact integer arithmetic, rounded
// down. A missing or expired state is a full bucket. A request spends
// req.Units() tokens when the bucket holds them; a denial spends nothing.
// [Params] is the pure algorithm, with the instant passed in
// ([Params.TakeAt], [Bucket.AllowAt]), so tests need no clock.
//
// A Decision tells the client (through the engine's RateLimit headers):
//
//   - Limit and Window (RateLimit-Policy q and w): the capacity over the
//     time the bucket takes to fill from empty ([Params.Advertised]): 10 per
//     second with a burst of 20 is 20 per 2s, so Remaining never exceeds
//     Limit.
//   - Remaining (r): the whole tokens left.
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
// tokens, and this Bucket and key): [Bucket.Refund] gives back exactly those
// tokens, never beyond capacity, and refuses a receipt that is not its own
// ([ErrBadReceipt]). [Bucket.Peek] answers whether a request would be
// allowed, and the state, without spending or writing: from the local
// state when the key was synced less than the sync interval ago (Allow
// would decide from it too), else from one KV read. Allow, Refund and Peek
// decide at [edgelimit.Request.At] unless the Bucket has its own clock
// (Config.Now), and at time.Now when neither is set.
//
// A [KV] stores states with get (with a consistency hint) and put (with a
// TTL), last writer wins: [DynamoDB] (one item "kv#<policy>#<keyhash>" per
// bucket, read with an eventually consistent GetItem, strongly consistent
// when the bucket asks (see below), written with an unconditional PutItem,
// expires_at set to when the bucket would be full again so TTL deletes idle
// buckets) and [Memory] (bounded, with expiry).
//
// # The cache
//
// Each process (each Lambda instance) keeps a bounded local state per key
// ([Config.CacheSize], about 200 bytes a key). A key synced less than the
// sync interval S ago (policy sync_interval, default 1s) is decided from
// local state, with no network call: that is what makes a hot key cost
// nanoseconds. Otherwise the decision syncs: it reads the KV, merges, decides
// and writes the result back (only when it changed the state), so the KV is
// written at most once per S per key per instance. The merge is
// conservative, the lower token count wins, and it counts what the KV cannot
// know yet:
//
//	merged = min(local, kv − unwritten − overwritten)
//
// where unwritten is this instance's spending since its own last write,
// and overwritten is the spending its recent writes carried that the KV's
// state cannot contain (that state was stamped before them: its writer read
// before they landed, and overwrote them). When the KV holds exactly what
// this instance last wrote, nobody else wrote, and the local state is exact.
// After a sync that found another writer, the key is contended: local
// decisions spend only what that sync saw and do not refill until the next
// one, so refill is shared through the KV instead of being spent once per
// instance. [Config.NoCache] makes every decision sync.
//
// Eviction never loses spending. Beyond CacheSize a least recently used key
// is dropped (sampled LRU). A key whose state the KV knows entirely (clean)
// is just dropped. One with unwritten spending or refunds (dirty) is first
// written back, a sync without a request, by the request that needed the
// room, after that request's own decision (so that a slow or failed
// write-back cannot fail it; it gets what is left of that request's time
// budget), and dropped once written; if the write fails the key stays,
// dirty, for a later eviction. (A dirty key whose bucket has refilled
// completely has nothing worth writing and is dropped as clean.) A key this
// process holds no state for (new to it, or dropped and asked for again)
// is read strongly consistent, at its first sync only: an eventually
// consistent read just after this instance's own write may return an older,
// fuller state, and a dropped key would come back more generous than it
// left. On DynamoDB that first read costs 1 read unit instead of 0.5 (a
// strongly consistent GetItem of an item under 4 KB); every later sync
// reads eventually consistent. Stats.Flushed counts the write-backs.
//
// # Accuracy: the over-admission bound
//
// Let C be the number of instances deciding one key concurrently, S the
// sync interval (0 without the cache), ρ one KV round trip (read to write)
// and δ the replication lag of an eventually consistent read (usually well
// under a second on DynamoDB; seconds between Global Table regions). A
// spend stays invisible to the other instances for at most the staleness
// interval Δ = S + ρ + δ.
//
//   - One instance, whatever the number of concurrent requests in it and
//     whatever the number of keys it sees, is exactly a token bucket while
//     no other instance writes the key: it never admits more than a perfect
//     bucket (requests arriving while a sync of their key is in flight are
//     decided from the local state and written with the next; an evicted
//     key's spending is written back before it is dropped, and read back
//     strongly consistent), and admits no fewer except in one case: a key
//     read back after its eviction (or a sync whose eventually consistent
//     read returned this instance's own older write) looks like another
//     instance's write, so it is treated as contended until its next sync,
//     which can only deny a refilled token early, for at most one sync
//     interval each time.
//     ([Memory]'s own bound, MemoryConfig.MaxKeys, is a different matter:
//     beyond it the store itself forgets its least recently used states,
//     and a forgotten state reads as a full bucket.)
//
//   - Each instance's local state is a private token bucket that merges
//     only downwards, so no instance admits more than a perfect bucket would
//     on its own while the key stays in its cache. Hence, over any period
//     T,
//
//     admitted ≤ C · ⌊B + r·T⌋, an over-admission of at most (C−1)·⌊B + r·T⌋,
//
//     for keys the instances keep cached. An instance that drops a key and
//     reads it back starts again from the KV's state, which holds all of
//     its own spending (written back, read strongly) but may lack another
//     instance's, lost to a read-modify-write race (last writer wins): each
//     read-back less than B/r (the time the bucket takes to fill) after the
//     drop can add up to B to that instance's share; a later one adds
//     nothing, since the private bucket would be full by then. A single
//     instance loses nothing.
//
//   - Per staleness interval: instances that read the same stale state can
//     each spend all of it before seeing the others, so the over-admission
//     per staleness interval is at most (C−1)·(A + r·Δ), where A ≤ B is what
//     that state held. A cold burst (C instances meeting a full bucket within
//     one Δ) reaches it: up to C·B admitted, (C−1)·B beyond capacity.
//
//   - Syncs that do not overlap lose nothing: every spend reaches the KV
//     within S and every later sync subtracts it. The excess then comes only
//     from spending not yet synced, and it shrinks as syncs spread out
//     (C·ρ ≪ S). Overlapping syncs (read-modify-write races, last writer
//     wins) lose updates; the merge re-applies an instance's own overwritten
//     spending when it can tell, and the second bullet bounds the rest.
//
// With the policy's defaults a client spread over C concurrent instances
// can therefore get up to C times its quota during a burst; a client that
// lands on one instance (the usual case for a browser on a warm function)
// gets exactly its quota. docs/kvbucket.md has the measured numbers.
//
// # Failure modes
//
// The engine sets the time budget of a decision in ctx (store_timeout,
// default 100ms); ctx goes straight to the SDK. [DynamoDB] caps the SDK's
// back-off between retries (DynamoDBConfig.RetryBackoff, default 10 ms, as
// durablecounter does), so that a throttled call gives up after the
// client's attempts (4 for DynamoDB by default: 3 back-offs, 30 ms) well
// inside the budget, instead of waiting it out. A KV error is returned
// with context (the engine applies on_store_error, fail open by default for
// this strategy, logs and counts it), and the failed call spent nothing.
// A failed sync of a key this process knows counts as that interval's
// attempt: the key is decided locally until the next sync is due, so a
// broken KV costs one error per key per S per instance, not one timeout per
// request. A failed write-back of an evicted key keeps it in the cache.
// Whatever a KV returns is clamped into range; nothing panics. A
// state stamped in the future (clock skew between instances) refills only
// once the clock catches up; one more than [MaxClockSkew] ahead is
// re-stamped. Sentinel errors: [ErrBadConfig], [ErrBadKey], [ErrBadItem],
// [ErrBadReceipt], [ErrThrottled].
package kvbucket
