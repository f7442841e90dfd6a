// Package edgelimit rate-limits serverless HTTP APIs on AWS Lambda without
// Redis.
//
// The root package is the contract every strategy meets on, and the engine
// that applies it; nothing else:
//
//   - [Limiter], [Request] and [Decision]: one small interface every strategy
//     implements. A denial is a Decision; an error means the backend failed.
//     What else a limiter can do is an optional ability, each an interface
//     of its own that the engine finds by type assertion and a strategy
//     asserts at compile time: [Refunder], [Peeker], [Charger], [Finisher],
//     [BatchLimiter], [Localizer], [Quoter], [Resetter], [Granter] and
//     [Unwrapper].
//   - [Engine]: built by [New] from a policy file (package policy) and a
//     limiter per policy, it matches a request to its policies, hashes the
//     keys, applies the allow and deny lists, tiers and overrides, asks the
//     limiters (atomically where a backend allows), gives back what was spent
//     when another policy denies, and renders the RateLimit headers
//     (draft-ietf-httpapi-ratelimit-headers-11) and RFC 9457 problem bodies
//     into a [Verdict]. The adapters in package middleware translate Lambda
//     events and net/http requests into an [Input] and back; a handler finds
//     its Verdict with [FromContext].
//
// The policy file's syntax, and what a strategy declares to the parser, are
// package policy's; the strategies are packages of their own (durablecounter,
// kvbucket, signedwindow, inflight), and setup builds an Engine from a file
// and the environment. ARCHITECTURE.md draws the whole.
//
// # Client state travels through one channel
//
// A strategy whose client carries state (a signed window token, a proof of
// work) reads the request's headers itself ([Request].Header) and answers
// with a header field and problem-body words of its own
// ([Decision].Response). The engine passes them on without reading them,
// so it has no special case for any strategy, and a new one needs no change
// here.
//
// # Keys and secrets
//
// Client keys are never stored raw: the engine replaces each with an
// HMAC-SHA256 keyed by Config.HashSecret and mixed with the policy's name
// before any limiter sees it ([Engine.KeyOf] computes it for an operator).
// The client address is the one in the event's request context;
// X-Forwarded-For is read only when a policy declares how many proxy hops to
// trust.
package edgelimit
