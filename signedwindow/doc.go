// Package signedwindow enforces `strategy: signed` policies with no storage:
// the client carries its window's count in an HMAC-signed token, and with
// proof_of_work a fresh window costs a proof of work (package pow).
//
// # Tokens
//
// A window token is a JWT, HS256 through github.com/golang-jwt/jwt/v5, with
// typed claims:
//
//	header  {"alg":"HS256","kid":"k2"}
//	claims  {"aud":"tts","sub":"<hashed client key>","jti":"<16 base64url>","nbf":1700000000,"exp":1700000060,"n":3}
//
// aud is the policy and sub the engine's keyed hash of the client key, so a
// token issued for one policy or client is worthless for any other; nbf and
// exp are the window (whole seconds, exp - nbf = the policy's window rounded
// up); n is the units spent in it; jti names the token chain of the window.
// Verification is pinned to HS256 (jwt.WithValidMethods), requires exp
// (jwt.WithExpirationRequired) and checks aud (jwt.WithAudience); the typed
// claims decode without reflection and only in the shape this package
// writes. The MAC key is derived from each secret with the label
// "edgelimit/signedwindow/token/v1" (proof-of-work challenges use another),
// and a pool of keyed HMAC states per key, installed as the token's
// jwt.SigningMethod by the key func, means no token re-derives the HMAC key.
// Signing writes the same bytes golang-jwt would, without reflection.
//
// # Decisions
//
// Allow, in one call: find the request's token for this policy (the
// Edgelimit-Token header may hold several, comma-separated; the first that
// verifies for this policy is used), verify it, check its binding and
// window, spend its count in the replay cache, and re-sign it with n + cost:
//
//   - a valid token with room: allowed; Decision.Token is the new token.
//   - a valid token without room: without proof_of_work, denied until the
//     window ends (Retry-After); with proof_of_work, as if absent.
//   - no valid token, without proof_of_work: the first request of a window
//     mints a token for free. Dropping the token therefore resets the count:
//     such a policy only paces clients that cooperate (browsers, SDKs, the
//     reference client); it is no defence against a client that discards
//     tokens.
//   - no valid token, with proof_of_work: a valid, unspent proof in
//     Edgelimit-Proof (several may be sent, comma-separated) mints a window
//     worth `limit` units; otherwise the request is denied with a challenge
//     (Decision.Challenge), which the engine sends in Edgelimit-Challenge and
//     in the problem body.
//
// An invalid, expired, not-yet-valid, tampered, foreign (other policy,
// client or key ring), oversized (> 4 KiB), malformed or replayed token is
// treated as absent — never an error: Allow has no backend and never fails.
// Verify reports the private cause, for diagnostics. Limiter also implements
// edgelimit.Refunder: when another policy denies the request, the engine
// does not send the new token, and Refund undoes the spend so that the
// client's token (or proof) is good for its retry.
//
// # Keys
//
// A KeyRing holds the secrets (at least 32 bytes each): the first signs,
// all verify, a key removed from the ring stops verifying. EDGELIMIT_SECRETS
// lists them as "kid:base64,kid:base64", newest first (ParseKeyRing); NewKey
// makes an entry. Rotate in three deployments so that no instance meets a
// token signed by a key it does not know: "old,new" (new verifies), then
// "new,old" (new signs), then, after the longest window plus the
// proof-of-work TTL, "new". Keys never appear in errors, String, %v, %#v or
// logs: ParseKeyRing's errors name an entry by position and describe its
// shape, never its text, and it refuses a key id that could be a secret
// (key ids are public: every token's header carries one).
//
// # Threat model and replay
//
// What the server checks costs microseconds and no storage: an attacker
// cannot forge or alter a token or challenge without a key, move one to
// another client key or policy, use an expired one, or buy a window without
// doing 2^bits hashes on average. What no storage-free scheme can stop is
// replay: a token is a bearer value, and a server that remembers nothing
// would accept the same token, or proof, again and again.
//
// Replay is bounded by a per-instance replay cache (pow.ReplayCache). A
// window's chain id (jti) is its proof's challenge salt; every spend of the
// chain moves the chain's watermark on that instance, so each count of a
// chain is admitted at most once per instance, in increasing order, and the
// proof's own spend is the chain's first. Entries live until the tokens of
// the chain can no longer verify (exp plus the proof-of-work TTL). So with
// proof_of_work, one proof buys at most limit × (the number of instances
// that serve the client before the window ends) units, however the client
// replays. Measured (TestReplaySimulation: limit 10 per minute, a client
// sending 1 000 requests in the window, instances are separate Limiters with
// their own caches and one injected clock):
//
//	client                                          1 instance   10 instances
//	honest client: one proof, follows its token             10             10
//	replays its first token, round-robin                      2             11
//	replays its proof, round-robin                            1             10
//	best replay, client picks the instance                   10            100
//	best replay, random routing                              10             65
//	no proof_of_work, token dropped each time             1 000
//	(no replay cache) replays its first token               999
//
// On Lambda the client does not pick the instance; the bound is reached only
// by a client whose requests reach many warm instances within one window,
// and a new instance (cold start, scaling) starts with an empty cache. The
// cache holds pow.DefaultReplayEntries (65 536) entries, one per active
// window, about 110 bytes each; when it is full the entry closest to expiry
// is forgotten first, which reopens that one chain to replay on that
// instance. An honest client that sends two requests with the same token at
// once may see one refused (as replayed) and pay a new proof: send requests
// of one client in sequence, as the reference client and pow.js's demo do.
//
// Instances must agree on time to well within a request's round trip (NTP,
// as Lambda provides): a token minted by one instance is not yet valid on an
// instance whose clock is behind its nbf.
//
// # Performance
//
// A decision (verify + replay-cache spend + re-sign) against a plain
// golang-jwt baseline doing less (parse with MapClaims, then sign a new
// token; no binding, no replay cache), in the same run, on a shared 2-core
// AMD EPYC under load (medians of 10 interleaved runs of
// `go test -run='^$' -bench='^Benchmark(BaselineJWT|Decision)$' -benchmem -count=1 -benchtime=20000x ./signedwindow/`):
//
//	benchmark              ns/op    cpu-ns/op   B/op   allocs/op
//	BaselineJWT           44 775       31 659   6 112         107
//	Decision              16 948       12 282   1 744          26
//	ratio                   2.85×        2.59×  (every run ≥ 2.2× wall, ≥ 1.9× CPU)
//
// Most of what remains is golang-jwt's own header decoding into a map and
// its json.Unmarshal of the claims. cpu-ns/op is the process CPU time per
// operation, steadier than wall time on a shared machine.
package signedwindow
