// Package powgate puts a proof of work between a soft threshold and the
// hard limit of a durable or kv policy: a client that uses more than the
// threshold of its quota pays for each further request with work, and is
// refused only past the limit.
//
// # Model
//
// A Gate (Wrap) wraps the policy's limiter. For each client key, counting
// the units used after the request (the quota less what would remain, plus
// the request's cost) against the quota in force (the decision's Limit:
// the policy's limit, a bucket's burst, a tier's):
//
//	used ≤ above           admitted as by the inner limiter alone
//	above < used ≤ limit   a valid proof: admitted; none: 429 with a challenge, nothing spent
//	used > limit           denied as by the inner limiter, with its Retry-After and no challenge
//
// Work cannot buy past the hard limit: a proof presented there is refused
// with the inner limiter's denial, and is not spent. Options.Above is in
// units, or with AbovePercent a share of the quota in force (so that tiers
// and overrides keep their proportions).
//
// The challenges are package pow's, stateless and signed, the protocol
// signedwindow's: the 429 carries Edgelimit-Challenge, the detail
// pow.ChallengeDetail and the problem member {"challenge":{"challenge",
// "bits","expires"}}; the client retries with Edgelimit-Proof
// (challenge.nonce; a comma-separated list, of which the first
// pow.MaxProofCandidates are tried). package client's Transport and pow.js
// solve them. A challenge binds the hashed client key and the policy: a
// proof is worthless for another client or policy. Invalid, expired,
// foreign, too easy and replayed proofs are treated as absent (the request
// is challenged), never as errors. A challenge's decision announces the
// quota and what the hard limit still allows (RateLimit r), no effective
// window (t is left out: nothing is available without work) and no wait
// of its own (Retry-After is the engine's floor, 1 second; a solving
// client retries at once).
//
// # What a proof buys
//
// Exactly one request, of its cost in units, within the TTL of its
// challenge (default 10 s), for the client key and policy it was issued
// to. A proof that buys nothing is given back on this instance: when the
// hard limit denies the request, when the store fails, and when the
// engine refunds the decision because another policy of the route denied
// (Refund). Package tests pin each case (TestGateSteps, TestGateRefund,
// TestEngineRefundsPaidRequest).
//
// # Replay
//
// A proof is spent in a per-instance pow.ReplayCache (default 65 536
// entries, about 110 bytes each, some 7 MiB; an entry lives until its
// challenge expires): one instance accepts it once, however many
// goroutines present it (TestConcurrentProofs: 8 proofs sent by 8
// goroutines at once admit 8 requests). The same proof presented to N
// instances within its TTL buys up to N requests, one per instance
// (TestConcurrentInstances). Each of them is still counted by the inner
// limiter, so replay can skip the work between the threshold and the
// limit, never pass the limit (exact for durable; kv as approximate as its
// documentation says). A cache that overflows forgets the entry closest
// to expiry first, reopening that proof on that instance.
//
// # The threshold under concurrency
//
// The threshold is soft; the limit is not. A request without a proof is
// peeked, then (below the threshold) spent: one that lands above the
// threshold because others spent between its peek and its spending is
// admitted all the same. The race is as wide as the requests of one key in
// flight at once, on every instance. In our runs of TestConcurrentThreshold
// (64 goroutines at once on an in-memory store, a limit of 40 gated above
// 20) 20 or 21 were admitted without work; in TestDynamoConcurrent (the
// same on dynalite and moto, two instances) all 64 peeked before any spent,
// and all 40 units of the limit went without work. Nothing is ever admitted past the limit, and no
// request is denied below it. (Refunding an admission that lands above the
// threshold, and challenging it instead, would make the threshold exact, but
// the refunded units would deny concurrent requests below the limit for the
// time of the refund, and durable's deny cache would keep such a denial
// until the window ends. An exact threshold without that needs the inner
// limiter to spend only within a bound, in its one conditional write.)
//
// # Costs
//
// A request without a proof costs a peek before it spends: for durable a
// consistent read (none within durablecounter.PeekFreshness, 1 s, of the
// last read of the key, when this instance has not spent on it since) before
// its conditional write; for kv its local state. A challenge is that peek
// alone and writes nothing. A request with a proof costs one SHA-256 and one
// HMAC (0.4 to 1.5 µs, by the machine's load) and one Allow, no peek.
// docs/powgate.md has the measured figures; TestDynamoCalls counts the calls
// on DynamoDB.
//
// # Transactions
//
// A Gate is not an edgelimit.BatchLimiter, so the engine decides a gated
// durable policy alone, before the route's other durable policies, which
// it commits together in one transaction without it. When one of those
// denies, the gated policy's spending is refunded (a second write): until
// then it is visible to concurrent requests, and a refund that fails
// leaves the units spent until they leave the window (under-admission,
// never over; the engine logs it and reports it to metrics). Route
// policies that must commit all or nothing are not to be gated.
//
// # What the engine sees
//
// Peek is the inner limiter's and never challenges: the engine peeks at a
// policy once another denied the request, and work done then would buy
// nothing. Refund, Local (the in-process twin of on_store_error: local,
// gated alike, sharing the challenges and the replay cache) and Quota are
// forwarded; Unwrap reaches the inner limiter for what is not (an
// operator's Reset or Grant, and the settlement of a policy that charges
// after the response: charge and charge_status reserve with Allow, so a
// proof buys the reservation, and the inner limiter settles it). Challenged
// and Paid tell metrics why a decision was what it was.
//
// # Wiring
//
// A strategy declares the field (Field, "proof_of_work") and reads it with
// Parse into its own options, which implement Gated; a program builds its
// limiters as usual and wraps them with Gating, which gates exactly the
// policies whose options carry proof_of_work (OptionsOf), sharing one
// replay cache and the key ring of the signed strategy.
package powgate
