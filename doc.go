// Package edgelimit rate-limits serverless HTTP APIs on AWS Lambda without
// Redis.
//
// The root package is the contract every piece meets on, and the engine;
// nothing else:
//
//   - [Limiter], [Request] and [Decision]: one small interface every strategy
//     implements, with optional abilities the engine finds by type assertion
//     ([Refunder], [Peeker], [Charger], [Finisher], [BatchLimiter], and the
//     methods listed on Limiter). A denial is a Decision; an error means the
//     backend failed.
//   - [PolicyFile]: the strict policies.yaml that says which policies guard
//     which routes, where each finds its client key, how it fails, and its
//     allow and deny [List]s and quota [Tiers].
//   - [Engine]: matches a request to its policies, hashes the keys, asks the
//     limiters (atomically where a backend allows), gives back what was
//     spent when another policy denies, and renders the RateLimit headers
//     (draft-ietf-httpapi-ratelimit-headers-11) and RFC 9457 problem bodies
//     into a [Verdict]. The adapters in package middleware translate Lambda
//     events and net/http requests into an [Input] and back.
//
// # Strategies own their options
//
// The parser reads the fields every policy has (name, routes, key, limit,
// window, cost, the failure mode, tiers) and hands the rest of a policy's
// fields to its [Strategy], which a strategy package [Register]s from init:
// durablecounter, kvbucket, inflight and signedwindow each declare, validate
// and document their own fields, with messages that point at the file's
// line ([Fields]). A program parses the strategies it links, so adding a
// strategy touches its own package and one registration, and a Lambda
// function links only the strategies its policy file uses.
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
