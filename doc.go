// Package edgelimit rate-limits serverless HTTP APIs on AWS Lambda without
// Redis.
//
// The root package is the shared contract every piece meets on:
//
//   - [Limiter], [Request] and [Decision]: one small interface every strategy
//     implements. A denial is a Decision, an error means the backend failed.
//   - [PolicyFile]: the strict policies.yaml that says which policies guard
//     which routes, where each finds its client key, and how it fails.
//   - [Engine]: matches a request to its policies, extracts and hashes the
//     keys, evaluates the limiters (atomically where a backend allows, and
//     refunding soft quotas when another policy denies), and renders the
//     RateLimit headers (draft-ietf-httpapi-ratelimit-headers) and RFC 9457
//     problem bodies. The adapters in package middleware translate Lambda
//     events and net/http requests into an [Input] and back.
//
// The strategies live in their own packages so that importing one never pulls
// in another's backend: durablecounter (exact counts on DynamoDB conditional
// writes), kvbucket (a token bucket on an eventually consistent KV) and
// signedwindow with pow (no storage: signed tokens and proof of work).
// Package setup wires them to a policy file.
//
// Client keys are never stored raw: the engine replaces them with a keyed
// hash ([KeyHasher]) before any limiter sees them. The client address is the
// one in the event's request context; X-Forwarded-For is read only when a
// policy declares how many proxy hops to trust.
package edgelimit
