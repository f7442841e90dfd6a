package edgelimit

import (
	"context"
	"time"
)

// Request is what one policy is asked to admit.
type Request struct {
	// Key is the client's partition key for the policy, already normalised and
	// hashed (see KeyHasher): never a raw IP address or API key.
	Key string
	// Cost is the number of units the request spends. Zero means 1.
	Cost int64
	// Token is client-carried state (a signed window token), or empty.
	Token string
	// Proof is a proof-of-work solution, or empty.
	Proof string
}

// Units returns the request's cost, defaulting to 1.
func (r Request) Units() int64 {
	if r.Cost <= 0 {
		return 1
	}
	return r.Cost
}

// Decision is one policy's answer. A denial is a Decision with Allowed false,
// never an error; an error from a Limiter means its backend failed.
type Decision struct {
	Allowed bool
	// Policy is the policy name, as shown in RateLimit-Policy.
	Policy string
	// Limit is the quota per Window.
	Limit  int64
	Window time.Duration
	// Remaining is the quota left after this request; never negative.
	Remaining int64
	// Reset is the time until the quota is fully available again.
	Reset time.Duration
	// RetryAfter is how long the client should wait before a retry can
	// succeed; zero when Allowed.
	RetryAfter time.Duration
	// Token is new client state to hand back (Edgelimit-Token), if any.
	Token string
	// Challenge is a proof-of-work challenge to hand back, if any.
	Challenge *Challenge
	// Degraded reports that the store failed and the decision was made by the
	// policy's on_store_error mode instead of by counting.
	Degraded bool
}

// Challenge is a proof-of-work challenge handed to a client in a 429.
type Challenge struct {
	// Value is the opaque, signed challenge string the client must solve.
	Value string `json:"challenge"`
	// Bits is the number of leading zero bits the proof's hash needs.
	Bits int `json:"bits"`
	// Expires is when the challenge stops being accepted.
	Expires time.Time `json:"expires"`
}

// Limiter decides requests for one policy. Implementations are safe for
// concurrent use. Allow returns an error only when its backend failed; the
// caller then applies the policy's on_store_error mode.
type Limiter interface {
	Allow(ctx context.Context, req Request) (Decision, error)
}

// LimiterFunc adapts a function to the Limiter interface.
type LimiterFunc func(ctx context.Context, req Request) (Decision, error)

// Allow calls f(ctx, req).
func (f LimiterFunc) Allow(ctx context.Context, req Request) (Decision, error) { return f(ctx, req) }

// Refunder is an optional ability: a limiter that can give back the units an
// earlier Allow spent. The engine uses it when a later policy on the same
// route denies the request, so that a denial by one policy does not spend
// another's quota.
type Refunder interface {
	Refund(ctx context.Context, req Request) error
}

// Localizer is an optional ability: a limiter backed by a shared store that
// can build an in-process twin of itself (the same policy, its state in this
// process only). For a policy with on_store_error: local, the engine asks
// the twin while the store fails, so each instance still holds the limit on
// its own instead of admitting everything (allow) or nothing (deny).
type Localizer interface {
	Local() (Limiter, error)
}

// BatchLimiter is an optional ability: limiters that share a backend and can
// decide several requests atomically, all spent or none.
type BatchLimiter interface {
	Limiter
	// BatchKey identifies the backend. Limiters with equal, non-empty keys
	// can be decided together by AllowBatch of any of them.
	BatchKey() string
	// AllowBatch decides items[i].Request against items[i].Limiter. Either
	// every decision is allowed and every item was spent, or none was spent;
	// then each denied decision names a violated policy, and allowed ones
	// report the state without this request.
	AllowBatch(ctx context.Context, items []BatchItem) ([]Decision, error)
}

// BatchItem is one request in an atomic batch.
type BatchItem struct {
	Limiter BatchLimiter
	Request Request
}

// Factory builds the Limiter for a policy. Strategy packages do not import
// each other; the setup package provides the Factory that knows them all.
type Factory func(p *Policy) (Limiter, error)
