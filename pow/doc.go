// Package pow issues and verifies stateless proof-of-work challenges, solves
// them (in Go here, in the browser with the embedded pow.js), and remembers
// spent proofs per instance.
//
// # Model
//
// A server that wants work from a client answers 429 with a challenge
// (Challenger.Issue): a signed, short-lived statement, 48 base64url
// characters encoding 36 bytes:
//
//	version (1) | bits (1) | expiry, Unix ms (6, big-endian) | salt (12) | tag (16)
//
// The tag is HMAC-SHA256, truncated to 128 bits, over the first 20 bytes,
// the policy name and the hashed client key, under a key derived from each
// configured secret with the label "edgelimit/pow/challenge/v1" (so a
// challenge can never pass for a signed-window token, which uses another
// label). Policy and client key are bound by the tag, not sent: a challenge
// issued to one client or policy fails verification for any other.
//
// The client answers with a proof, challenge + "." + base64url(nonce), where
// nonce is 8 bytes, big-endian, such that
//
//	SHA-256(challenge bytes ‖ nonce bytes)
//
// starts with at least bits zero bits. The hashed message is 44 bytes, one
// SHA-256 block. Solve (every core) and Solver find the smallest such nonce,
// so a proof does not depend on the number of workers.
//
// Verification (Challenger.VerifyAt) takes no storage: decode, check the
// version, that the challenge asks for at least the configured bits and
// has not expired, one SHA-256 for the work, and last one HMAC (from a pool of
// keyed states, compared in constant time) for the tag, trying the newest
// key first. A proof that did not do the work is refused after the SHA-256,
// before any HMAC. It costs about 1.5 µs and no allocation on a loaded 2-core
// machine whose SHA-256 of 44 bytes takes 250 ns (about 0.6 µs where that
// hash takes 110 ns).
//
// # Replay
//
// A proof is valid until its challenge expires (DefaultTTL, 10 s), and the
// server keeps no record of the challenges it issued. Challenger.Redeem spends
// proofs in a ReplayCache: a proof is accepted once per cache, that is once
// per instance (Lambda execution environment), and its entry is dropped when
// the challenge expires. The cache is bounded (DefaultReplayEntries entries,
// about 110 bytes each, some 7 MiB); when full it forgets the entry closest
// to expiry first, reopening that one proof to replay on that instance.
//
// What a storage-free scheme cannot stop: the same proof presented to N
// instances within its TTL is accepted N times. Package signedwindow turns a
// proof into a token chain whose spends share the proof's cache entry, so
// this multiplies what one proof buys by at most the number of instances that
// serve the client; its documentation has the measured figures.
//
// # Expected work
//
// The work is geometric: the mean is 2^bits hashes (measured: 8 bits, 264
// over 512 challenges; 12 bits, 4 051 to 4 074; 16 bits, 68 651 to 75 539;
// 20 bits, 833 740 over 20), the median 0.69 × 2^bits, and one solve in 20
// takes over 3 × 2^bits. Times below are the mean, measured on a shared
// 2-core AMD EPYC (load average about 9) where the Go solver computes about
// 5 M hashes/s on both cores and pow.js about 0.7 M hashes/s per worker
// (Node 20); a quiet desktop is several times faster, a phone slower.
//
//	bits  hashes (mean)   Go solver, 2 cores          pow.js, 1 worker   pow.js, 4 workers
//	   8            256   0.05 ms (measured)           0.4 ms             0.1 ms
//	  12          4 096   0.7 ms (measured)            6 ms               1.5 ms
//	  14         16 384   3 ms                         23 ms              6 ms
//	  16         65 536   13-34 ms (measured)          94 ms              23 ms
//	  18        262 144   52 ms                        0.37 s             94 ms
//	  20      1 048 576   0.17 s (measured)            1.5 s              0.37 s
//	  22      4 194 304   0.84 s                       6 s                1.5 s
//	  24     16 777 216   3.4 s                        24 s               6 s
//	  26     67 108 864   13 s                         96 s               24 s
//	  32  4 294 967 296   14 min                       1.7 h              26 min
//
// Work slows scripts and casual abuse; it does not stop an attacker with a
// GPU (billions of SHA-256 per second) who buys quota at 2^bits hashes per
// window. Pick bits so that a person waits well under a second in a browser
// (14 to 18), and rely on the window's limit for the rest.
//
// # Browser
//
// ScriptJS is pow.js, dependency-free: EdgelimitPow.solve(challenge,
// {onProgress, signal, workers}) resolves to the Edgelimit-Proof value,
// hashing in Web Workers started from the script's own URL (falling back to
// slices on the main thread), with progress reports and cancellation by
// AbortSignal. DemoHTML (DemoPage, DemoHandler) is a page that calls a
// signed route, solves with a progress bar, and shows the responses and the
// remaining quota from the RateLimit header; ScriptHandler serves pow.js.
// Both are embedded; `edgelimit serve` serves them.
package pow
