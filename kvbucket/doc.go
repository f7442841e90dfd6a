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
// A [KV] stores states with get (with a consistency hint) and put (with a
// TTL), last writer wins: [DynamoDB] (one item "kv#<policy>#<keyhash>" per
// bucket, read with an eventually consistent GetItem, written with an
// unconditional PutItem, expires_at set to when the bucket would be full
// again so TTL deletes idle buckets) and [Memory] (bounded, with expiry).
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
// # Accuracy: the over-admission bound
//
// Let C be the number of instances deciding one key concurrently, S the
// sync interval (0 without the cache), ρ one KV round trip (read to write)
// and δ the replication lag of an eventually consistent read (usually well
// under a second on DynamoDB; seconds between Global Table regions). A
// spend stays invisible to the other instances for at most the staleness
// interval Δ = S + ρ + δ.
//
//   - One instance, whatever the number of concurrent requests in it, is
//     exactly a token bucket while no other instance writes the key: it
//     admits what a perfect bucket admits, no more and no fewer (requests
//     arriving while a sync of their key is in flight are decided from the
//     local state and written with the next).
//
//   - Each instance's local state is a private token bucket that merges
//     only downwards, so no instance admits more than a perfect bucket would
//     on its own (as long as the key stays in its cache: an evicted key
//     starts again from the KV). Hence, over any period T,
//
//     admitted ≤ C · ⌊B + r·T⌋, an over-admission of at most (C−1)·⌊B + r·T⌋.
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
//     spending when it can tell, and the first bullet bounds the rest.
//
// With the policy's defaults a client spread over C concurrent instances
// can therefore get up to C times its quota during a burst; a client that
// lands on one instance (the usual case for a browser on a warm function)
// gets exactly its quota. docs/kvbucket.md has the measured numbers.
//
// # Failure modes
//
// The engine sets the time budget of a decision in ctx (store_timeout,
// default 100ms); ctx goes straight to the SDK. A KV error is returned
// with context (the engine applies on_store_error, fail open by default for
// this strategy, logs and counts it), and the failed call spent nothing.
// A failed sync of a key this process knows counts as that interval's
// attempt: the key is decided locally until the next sync is due, so a
// broken KV costs one error per key per S per instance, not one timeout per
// request. Whatever a KV returns is clamped into range; nothing panics. A
// state stamped in the future (clock skew between instances) refills only
// once the clock catches up; one more than [MaxClockSkew] ahead is
// re-stamped. Sentinel errors: [ErrBadConfig], [ErrBadKey], [ErrBadItem],
// [ErrThrottled].
package kvbucket
