package edgelimit

import (
	"context"
	"errors"
	"time"

	"github.com/edgelimit/edgelimit/policy"
)

// Request is what one policy is asked to admit.
type Request struct {
	// Key is the client's partition key for the policy, already normalised and
	// hashed by the engine: never a raw IP address or API key. It never
	// changes, but it lies in memory the engine allocated for the whole
	// request (with its header values): a limiter that keeps it for long,
	// as a map key, should keep a copy (strings.Clone) so as not to keep
	// that memory alive with it.
	Key string
	// Cost is the number of units the request spends. Zero means 1.
	Cost int64
	// At is the instant of the decision, read once by the engine for every
	// policy of the request. A limiter built with its own clock (a Now in its
	// Config) uses that instead, so tests that inject one keep it; a zero At
	// means the limiter reads its clock itself.
	At time.Time
	// Header gives the limiter the request's headers, for strategies whose
	// client state travels in headers (a signed window token, a proof of
	// work). It may be nil.
	Header Getter
	// Limits, when not zero, is the quota in force for this request instead
	// of the policy's: the tier the request's tier key chose, or an override
	// an operator set for its client key. Its zero fields keep the policy's
	// (and the strategy's own, like a burst).
	Limits policy.Limits
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
	// Degraded reports that the store failed and the decision was made by the
	// policy's on_store_error mode instead of by counting.
	Degraded bool
	// Policy is the policy name, as shown in RateLimit-Policy.
	Policy string
	// Limit and Window are the quota the client is told, in
	// RateLimit-Policy (q and w): for a bucket (gcra, kv), its burst over the
	// time it takes to fill, so that Remaining never exceeds Limit.
	Limit  int64
	Window time.Duration
	// Remaining is the quota left after this request (r); never negative.
	Remaining int64
	// Reset is draft-11's effective window (t): the time within which the
	// client can use no more than Remaining. For a fixed window (and a signed
	// window), until the window ends; for a bucket, a sliding window and a
	// sliding log, until the next unit comes back. Zero omits t.
	Reset time.Duration
	// RetryAfter is how long the client should wait before a retry can
	// succeed; zero when Allowed. It is never shorter than Reset.
	RetryAfter time.Duration
	// Response, when set, is what the limiter adds to the response besides
	// the RateLimit fields: its own client state (a signed window token, a
	// proof-of-work challenge) and, for a denial, words and members for the
	// problem body. The engine passes it on without reading it.
	Response *Response
	// Receipt records what an allowed decision spent, for Refunder.Refund.
	Receipt Receipt
	// Reason, for metrics and logs only (never sent), says why the limiter
	// decided as it did when counting alone did not: "soft-threshold" (a
	// proof of work is asked for, package powgate), "proof-of-work" (a
	// proof paid for the request). Empty otherwise.
	Reason string
	// Delay, for an allowed decision of a policy with max_delay, is how
	// long the request must wait for its turn: its units are already
	// spent for then, and the engine holds the request that long before
	// it is served. Zero: served at once.
	Delay time.Duration
}

// Field is one HTTP header field.
type Field struct{ Name, Value string }

// Response is what a limiter adds to the response a Decision leads to.
type Response struct {
	// Field is a response header field for the client (Edgelimit-Token,
	// Edgelimit-Challenge). It is sent unless the decision is undone
	// (refunded) because another policy denied the request; fields of one
	// name from several policies are joined into one list.
	Field Field
	// Detail, for a denial, is a sentence the problem body's detail adds
	// (what to do besides waiting).
	Detail string
	// Extension, for a denial, is a JSON object whose members the problem
	// body carries (RFC 9457 extension members), e.g. {"challenge":{...}}.
	// Members the engine writes itself are not replaced.
	Extension string

	// members is Extension split into its members, when the engine
	// built it (a ban's); nil: split per body.
	members []extMember
}

// Receipt records what an allowed Decision spent, in its limiter's own
// terms, so that Refunder.Refund undoes exactly that spending and nothing
// else: the same window, shard, bucket or token chain, as of the instant it
// was spent. The engine only hands it back; its fields mean what the limiter
// that filled it says.
type Receipt struct {
	// At is when the units were spent, Unix nanoseconds.
	At int64
	// Slot is limiter-defined: a shard, a window, a position in a chain.
	Slot int64
	// ID is limiter-defined: a token chain.
	ID [16]byte
}

// Limiter decides requests for one policy. Implementations are safe for
// concurrent use. Allow returns an error only when its backend failed; the
// caller then applies the policy's on_store_error mode.
//
// What else a limiter can do is an optional ability, each its own
// interface below, which the engine finds by type assertion: [Quoter],
// [Localizer], [InProcess], [Refunder], [Peeker], [Charger], [Settler], [Finisher], [BatchLimiter],
// [Resetter], [Granter] and [Unwrapper]. A strategy package asserts the
// ones it implements at compile time (var _ edgelimit.Granter =
// (*Counter)(nil)), so that a misspelt method is a build error, not an
// ability silently missing.
//
// The ctx a limiter gets, in Allow and in every ability, is valid for the
// call only: a limiter must not keep it, or a context derived from it,
// once the call returns (the engine reuses a request's budget contexts).
type Limiter interface {
	Allow(ctx context.Context, req Request) (Decision, error)
}

// ErrWaited marks a limiter's error that ended a wait for another
// request's store call (one call answers many requests of a hot key, see
// durablecounter's deny cache) rather than a store call of this request:
// wrap it with the context's error (fmt.Errorf("...: %w: %w", ErrWaited,
// ctx.Err())). The policy's on_store_error still decides the request, but
// the store breaker does not count it: the call waited for is counted
// once, with its own result, so one slow call cannot count as a failure
// for each request that waited for it.
var ErrWaited = errors.New("edgelimit: waited for another request's store call")

// Quoter is an optional ability: a limiter whose decisions announce a
// quota other than its policy's limit and window (a bucket: its burst over
// the time it takes to fill). The engine announces it for the decisions it
// makes in the limiter's place when the store fails.
type Quoter interface {
	Quota() (limit int64, window time.Duration)
}

// Localizer is an optional ability: a limiter backed by a shared store that
// has an in-process twin (the same policy, its state in this process only),
// which decides while the store fails for a policy with on_store_error:
// local, so each instance still holds the limit on its own.
type Localizer interface {
	Local() (Limiter, error)
}

// Follower is an optional ability of an in-process twin (what
// Localizer.Local returns): it hears each decision the limiter it stands in
// for makes (req as the limiter was asked, d its answer), so that when the
// store fails it decides from what this instance last knew of the key
// (what d had left, as of req.At), not from a full quota. Follow is called
// on the request's path, so it must be cheap and never block on I/O.
type Follower interface {
	Follow(req Request, d Decision)
}

// Resetter is an optional ability: a limiter that can forget one client
// key's usage (an operator's reset, at the start of a billing cycle;
// Engine.Reset). req is the key's request as the engine would make it now:
// its hashed Key, At, and the Limits in force for the key (the default
// tier's, and the override's if one is set), so that a limiter whose stored
// state depends on the limits (a window of its own) finds it. A limiter
// resets the key under every tier of its policy as well.
type Resetter interface {
	Reset(ctx context.Context, req Request) error
}

// Granter is an optional ability: a limiter that can give one client key
// units beyond its quota, for the current window of req's limits when
// until is zero, else until that instant (Engine.Grant). req is as for
// Resetter.
type Granter interface {
	Grant(ctx context.Context, req Request, units int64, until time.Time) error
}

// InProcess is an optional ability: a limiter whose state, its keys
// included, never leaves this process (an in-memory store) reports true.
// The engine then hashes the policy's client keys with a faster keyed
// hash (SipHash-2-4, keyed from Config.HashSecret) instead of
// HMAC-SHA256: no other process and no operator command ever compares
// them. A limiter whose keys reach a shared store, a token or a challenge
// sent to the client must not report true, nor a wrapper (powgate.Gate)
// that cannot vouch for what it wraps. A policy with per-key overrides
// keeps HMAC whatever its limiter says: the override store is keyed by it.
// Engine.KeyOf hashes as the requests do, either way.
type InProcess interface {
	InProcess() bool
}

// Unwrapper is an optional ability: a limiter that decides in front of
// another (powgate.Gate). The engine finds the Resetter, Granter, Settler
// and Finisher of the wrapped limiter through it when the wrapper has none
// of its own.
type Unwrapper interface {
	Unwrap() Limiter
}

// ability finds an optional ability of l: l's own, else that of the
// limiter l wraps (Unwrap), and so on. A wrapper (powgate.Gate in front of
// a durable or kv limiter) keeps the abilities it implements itself (Peek,
// Refund) and lends the wrapped limiter's others: an operator's Reset and
// Grant, and Settle and Finish after the response, concern the wrapped
// limiter's state, which a wrapper does not keep.
func ability[T any](l Limiter) (T, bool) {
	for l != nil {
		if a, ok := l.(T); ok {
			return a, true
		}
		u, ok := l.(Unwrapper)
		if !ok {
			break
		}
		l = u.Unwrap()
	}
	var zero T
	return zero, false
}

// Refunder is an optional ability: a limiter that can give back the units an
// earlier Allow spent. The engine uses it when another policy on the same
// route denies the request, so that a denial by one policy does not spend
// another's quota. d is the allowed Decision that Allow returned for req:
// Refund undoes exactly what d spent (d.Receipt says what), nothing else,
// and returns an error only when the backend failed.
type Refunder interface {
	Refund(ctx context.Context, req Request, d Decision) error
}

// Peeker is an optional ability: a limiter that can tell whether a request
// would be allowed, and its policy's state, without spending anything. Once
// one policy of a route denies a request, the engine peeks at the route's
// policies it has not asked yet, so that the 429 names every violated
// policy and the longest wait, while the denied request spends nothing.
// Peek reports the state at the instant it answers: a denial it reports is
// real, and it may answer from a cache only where the cache proves it.
type Peeker interface {
	Peek(ctx context.Context, req Request) (Decision, error)
}

// Charger is an optional ability: a limiter that can spend units whether or
// not they fit (what a Settler does with a cost above its reservation). A charge that exceeds what is left takes
// the quota below zero: the policy then denies until it is back above.
// The returned Decision is the state after the charge.
type Charger interface {
	Charge(ctx context.Context, req Request) (Decision, error)
}

// Settler is an optional ability: a limiter that settles an admitted
// request once its real cost is known, after the response. The engine
// reserves before the handler runs (Allow of req, whose Units() are the
// reservation: the policy's reserve or cost, or what the application set
// with WithReservation) and then settles with the cost the request really
// had: at most the reservation gives the difference back (a refund is a
// settlement to zero), above it spends the excess whether or not it fits
// (the quota goes below zero once, and denies until it is back). d is the
// allowed Decision Allow returned for req (its Receipt says what was
// reserved, where); req.At is the instant of the settlement, not of the
// decision. The returned Decision is the state after the settlement, for a
// request of one more unit; an error means the backend failed, and the
// reservation then stands as it was spent.
type Settler interface {
	Settle(ctx context.Context, req Request, d Decision, cost int64) (Decision, error)
}

// Finisher is an optional ability: a limiter that must hear how a request
// it admitted ended (an in-flight limit releases its slot). d is the
// decision Allow returned for req; status is the response's (500 for a
// handler that failed or panicked), cost what the handler reported
// (Verdict.ReportCost; 0: none).
type Finisher interface {
	Finish(ctx context.Context, req Request, d Decision, status int, cost int64) error
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
