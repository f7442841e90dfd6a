package powgate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
)

// Header names of the protocol: the same as package signedwindow's and the
// clients' (package client, pow.js), defined once in package pow.
const (
	// HeaderChallenge carries a challenge in a 429.
	HeaderChallenge = pow.HeaderChallenge
	// HeaderProof carries the client's proofs in its retry.
	HeaderProof = pow.HeaderProof
)

// ErrConfig is wrapped by every error of Wrap and Local.
var ErrConfig = errors.New("powgate: bad configuration")

// Config configures Wrap.
type Config struct {
	// Policy is the gated policy: its Name binds the challenges (a proof
	// for one policy is worthless for another), and a policy that charges
	// after the response is refused. Required.
	Policy *policy.Policy
	// Options are the threshold and the challenges' difficulty and
	// lifetime (what Parse read from the policy file).
	Options Options
	// Secrets key the challenges' MAC: the first signs, all verify; each
	// at least 32 bytes. Every instance needs
	// the same ring (the key ring of EDGELIMIT_SECRETS). Required.
	Secrets [][]byte
	// Now is the Gate's clock. Without it the Gate decides at the
	// Request's At, or at time.Now() when At is zero; with it, it also
	// passes its instant on to the inner limiter as the Request's At.
	Now func() time.Time
	// Replay is the per-instance memory of redeemed proofs; default a new
	// pow.ReplayCache of pow.DefaultReplayEntries, private to this Gate.
	// One cache may be shared by every policy (proofs are named by random
	// salts, so they never collide).
	Replay *pow.ReplayCache
	// Rand supplies the challenges' salts; default crypto/rand. It must be
	// safe for concurrent use.
	Rand io.Reader
	// Logger, if set, receives at Debug level why a proof was treated as
	// absent. Default: no logging.
	Logger *slog.Logger
}

// Gate is a gated limiter: below its soft threshold it is the inner
// limiter; above it, up to the inner limiter's hard limit, a request needs
// a proof of work, and one proof buys one request. See the package
// documentation. It is safe for concurrent use.
//
// Besides Allow it has the abilities the engine looks for: Refunder,
// Peeker, Local and Quota, each the inner limiter's (wrapped as the
// Gate's needs). It is not an edgelimit.BatchLimiter, so the engine decides
// it alone, never in a transaction with other policies.
type Gate struct {
	inner  edgelimit.Limiter
	peek   edgelimit.Peeker
	refund edgelimit.Refunder
	name   string
	limit  int64
	window time.Duration
	opts   Options
	ch     *pow.Challenger
	replay *pow.ReplayCache
	now    func() time.Time
	// ownClock: Config.Now was set, and wins over the engine's Request.At.
	ownClock bool
	log      *slog.Logger
}

var (
	_ edgelimit.Limiter   = (*Gate)(nil)
	_ edgelimit.Refunder  = (*Gate)(nil)
	_ edgelimit.Peeker    = (*Gate)(nil)
	_ edgelimit.Localizer = (*Gate)(nil)
	_ edgelimit.Quoter    = (*Gate)(nil)
	_ edgelimit.Unwrapper = (*Gate)(nil)
)

// Wrap returns inner gated by cfg.Options: the Gate. inner must be an
// edgelimit.Peeker (a challenge must spend nothing, so the Gate asks before
// it spends) and an edgelimit.Refunder (so the engine can give back what a
// proof bought when another policy denies the request); the durable and kv
// limiters are both.
func Wrap(inner edgelimit.Limiter, cfg Config) (edgelimit.Limiter, error) {
	p := cfg.Policy
	if p == nil || p.Name == "" {
		return nil, fmt.Errorf("%w: Config.Policy (with a Name) is required", ErrConfig)
	}
	o := cfg.Options
	switch {
	case o.AbovePercent < 0 || o.AbovePercent > 99:
		return nil, fmt.Errorf("%w: policy %q: Options.AbovePercent %d must be between 1 and 99 (or 0: use Above)", ErrConfig, p.Name, o.AbovePercent)
	case o.AbovePercent == 0 && o.Above < 0:
		return nil, fmt.Errorf("%w: policy %q: Options.Above %d must not be negative", ErrConfig, p.Name, o.Above)
	}
	c, err := pow.New(pow.Config{Secrets: cfg.Secrets, Bits: o.Bits, TTL: o.TTL, Now: cfg.Now, Rand: cfg.Rand, Replay: cfg.Replay})
	if err != nil {
		return nil, fmt.Errorf("%w: policy %q: %w", ErrConfig, p.Name, err)
	}
	o.Bits, o.TTL = c.Bits(), c.TTL()
	g := &Gate{name: p.Name, limit: p.Limit, window: p.Window, opts: o, ch: c, replay: c.ReplayCache(), now: cfg.Now, ownClock: cfg.Now != nil, log: cfg.Logger}
	if g.now == nil {
		g.now = time.Now
	}
	w, err := g.with(inner)
	if err != nil {
		return nil, err // not a nil *Gate in a non-nil Limiter
	}
	return w, nil
}

// with returns a Gate like g around inner.
func (g *Gate) with(inner edgelimit.Limiter) (*Gate, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: policy %q: no inner limiter", ErrConfig, g.name)
	}
	peek, ok := inner.(edgelimit.Peeker)
	if !ok {
		return nil, fmt.Errorf("%w: policy %q: %T cannot peek (edgelimit.Peeker): a challenge would have to spend and refund, "+
			"and a spend that is refunded can deny a concurrent request that fits", ErrConfig, g.name, inner)
	}
	refund, ok := inner.(edgelimit.Refunder)
	if !ok {
		return nil, fmt.Errorf("%w: policy %q: %T cannot refund (edgelimit.Refunder)", ErrConfig, g.name, inner)
	}
	n := *g
	n.inner, n.peek, n.refund = inner, peek, refund
	return &n, nil
}

// Unwrap returns the inner limiter, for what the Gate does not forward
// (an operator's Reset or Grant).
func (g *Gate) Unwrap() edgelimit.Limiter { return g.inner }

// Options returns the Gate's options, with the defaults filled in.
func (g *Gate) Options() Options { return g.opts }

// Quota returns what the inner limiter's decisions announce in
// RateLimit-Policy (for the decisions the engine makes when the store
// fails): its Quota when it has one, else the policy's limit and window.
func (g *Gate) Quota() (limit int64, window time.Duration) {
	if q, ok := g.inner.(edgelimit.Quoter); ok {
		return q.Quota()
	}
	return g.limit, g.window
}

// at is the instant of req's decision.
func (g *Gate) at(req edgelimit.Request) time.Time {
	if g.ownClock || req.At.IsZero() {
		return g.now()
	}
	return req.At
}

// Allow decides req. A request with a valid proof for this client and
// policy, unspent on this instance, spends it and is decided by the inner
// limiter (the proof is given back when that denies or fails). A request
// without one is peeked first: denied by the hard limit, the peek's denial
// is the answer; would it leave more than the threshold used, the answer
// is a challenge, and nothing is spent; else the inner limiter decides.
// Invalid, expired, replayed and foreign proofs are treated as absent.
//
// An error is the inner limiter's: its store failed, and the engine applies
// the policy's on_store_error.
func (g *Gate) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	now := g.at(req)
	req.At = now
	if id, ok := g.redeem(now, req); ok {
		d, err := g.inner.Allow(ctx, req)
		if err != nil || !d.Allowed {
			// Nothing bought: the proof stays good for a retry.
			g.replay.Unspend(id, 0, 1)
			return d, err
		}
		if d.Response == nil {
			// (An inner limiter with a Response of its own keeps it; its
			// proof then stays spent if the decision is refunded.)
			d.Response = paidWith(id)
		}
		d.Reason = ReasonPaid
		return d, nil
	}
	pd, err := g.peek.Peek(ctx, req)
	if err != nil {
		return edgelimit.Decision{}, err
	}
	if !pd.Allowed {
		// Work cannot buy past the hard limit: the denial as it is.
		return pd, nil
	}
	if g.over(pd, req.Units()) {
		return g.challenge(now, req.Key, pd), nil
	}
	// Below the threshold, by the peek. Another request (another
	// goroutine, another instance) may spend between the peek and this
	// Allow, and this one then lands above the threshold without work: it
	// is admitted all the same. The threshold is soft; the limit is not.
	return g.inner.Allow(ctx, req)
}

// over reports whether a request of cost, on a key in the state the peek
// d shows (nothing of the request spent), would leave more than the
// threshold used.
func (g *Gate) over(d edgelimit.Decision, cost int64) bool {
	used := max(d.Limit-d.Remaining, 0) + cost
	return used > g.opts.threshold(d.Limit)
}

// challenge is the answer to a request that needs a proof: a denial that
// spent nothing, with the policy's state as the peek showed it (Remaining
// is what the hard limit still allows, each unit for work), no effective
// window (t is left out, as for the signed strategy's challenge: nothing is
// available without work) and no wait of its own (the engine's Retry-After
// is its floor, one second; a client that solves retries at once).
func (g *Gate) challenge(now time.Time, key string, pd edgelimit.Decision) edgelimit.Decision {
	ch := g.ch.IssueAt(now, key, g.name)
	return edgelimit.Decision{
		Policy:    pd.Policy,
		Limit:     pd.Limit,
		Window:    pd.Window,
		Remaining: pd.Remaining,
		Reason:    ReasonChallenged,
		Response: &edgelimit.Response{
			Field:     edgelimit.Field{Name: HeaderChallenge, Value: ch.Value},
			Detail:    pow.ChallengeDetail,
			Extension: ch.Extension(),
		},
	}
}

// redeem spends the first proof of req's Edgelimit-Proof header (a
// comma-separated list; the first pow.MaxProofCandidates are tried) that
// is valid for this client and policy at now and unspent on this instance,
// and returns its id.
func (g *Gate) redeem(now time.Time, req edgelimit.Request) (pow.ID, bool) {
	if req.Header == nil {
		return pow.ID{}, false
	}
	h := req.Header.Get(HeaderProof)
	if h == "" || len(h) > pow.MaxProofHeader {
		return pow.ID{}, false
	}
	for i := 0; i < pow.MaxProofCandidates && h != ""; i++ {
		var one string
		one, h, _ = strings.Cut(h, ",")
		p, err := g.ch.VerifyAt(now, strings.TrimSpace(one), req.Key, g.name)
		if err != nil {
			if !errors.Is(err, pow.ErrSignature) { // another policy's proof is not news
				g.debug(err)
			}
			continue
		}
		// The entry lives until the challenge expires; after that the
		// proof is refused as expired anyway.
		if g.replay.Spend(p.ID(), 0, 1, p.Expires, now) {
			return p.ID(), true
		}
		g.debug(pow.ErrReplayed)
	}
	return pow.ID{}, false
}

// Peek reports what the inner limiter would answer for req, spending
// nothing. It never challenges: the engine peeks at a policy once another
// has denied the request, and work a client did for this policy would buy
// nothing then.
func (g *Gate) Peek(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	req.At = g.at(req)
	return g.peek.Peek(ctx, req)
}

// Refund gives back what the allowed decision d spent: the inner
// limiter's units (its Refund, by d's Receipt) and, when a proof paid for
// d, the proof, so that a request another policy denied costs the client
// no work (its retry may present the same proof while it is unexpired). The
// proof comes back in this instance's replay cache whether or not the
// inner refund landed; an error is the inner limiter's.
func (g *Gate) Refund(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	id, paid := proofOf(d)
	if paid {
		d.Response = nil // the Gate's, not the inner limiter's
	}
	req.At = g.at(req)
	err := g.refund.Refund(ctx, req, d)
	if paid && d.Allowed {
		g.replay.Unspend(id, 0, 1)
	}
	return err
}

// Local returns the Gate around the inner limiter's in-process twin, for
// on_store_error: local: the same threshold, challenges and replay cache,
// so a proof the Gate issued is good with the twin and spent once for both.
func (g *Gate) Local() (edgelimit.Limiter, error) {
	lz, ok := g.inner.(edgelimit.Localizer)
	if !ok {
		return nil, fmt.Errorf("%w: policy %q: %T has no in-process twin (a Local method)", ErrConfig, g.name, g.inner)
	}
	twin, err := lz.Local()
	if err != nil {
		return nil, err
	}
	w, err := g.with(twin)
	if err != nil {
		return nil, err
	}
	return w, nil
}

func (g *Gate) debug(reason error) {
	if g.log != nil {
		g.log.Debug("powgate: proof treated as absent", slog.String("policy", g.name), slog.String("reason", reason.Error()))
	}
}

// The reasons a Gate's decisions give metrics and logs (Decision.Reason).
const (
	// ReasonChallenged: above the soft threshold, a proof is asked for.
	ReasonChallenged = "soft-threshold"
	// ReasonPaid: a proof of work paid for the request.
	ReasonPaid = "proof-of-work"
)

// paidPrefix starts the value of the unnamed field that marks a decision a
// proof paid for.
const paidPrefix = "powgate:"

// paidWith marks an allowed decision as bought by the proof id, for Refund:
// an unnamed response field, which the engine never sends (it sends only
// named fields, and none of a refunded decision), holding the proof's id.
func paidWith(id pow.ID) *edgelimit.Response {
	return &edgelimit.Response{Field: edgelimit.Field{Value: paidPrefix + string(id[:])}}
}

// proofOf returns the id of the proof that paid for d, if one did.
func proofOf(d edgelimit.Decision) (pow.ID, bool) {
	r := d.Response
	if r == nil || r.Field.Name != "" || len(r.Field.Value) != len(paidPrefix)+pow.SaltSize || !strings.HasPrefix(r.Field.Value, paidPrefix) {
		return pow.ID{}, false
	}
	var id pow.ID
	copy(id[:], r.Field.Value[len(paidPrefix):])
	return id, true
}

// Paid reports whether a proof of work paid for the allowed decision d
// (the request was above the soft threshold, or carried a proof anyway),
// for metrics and logs.
func Paid(d edgelimit.Decision) bool {
	_, ok := proofOf(d)
	return ok && d.Allowed
}

// Challenged reports whether d is a Gate's challenge: a denial that spent
// nothing and asks for a proof of work (the request was above the soft
// threshold), for metrics and logs.
func Challenged(d edgelimit.Decision) bool {
	return !d.Allowed && d.Response != nil && d.Response.Field.Name == HeaderChallenge
}

// Gating returns a Factory that builds each policy's limiter with build
// and wraps those of the policies with proof_of_work (OptionsOf) in a
// Gate, configured by base with the policy's Policy and Options. A Replay
// cache in base is shared by every Gate (proofs are named by random salts:
// they never collide), as setup does for one instance.
func Gating(build func(*policy.Policy) (edgelimit.Limiter, error), base Config) func(*policy.Policy) (edgelimit.Limiter, error) {
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		l, err := build(p)
		if err != nil {
			return nil, err
		}
		o := OptionsOf(p)
		if o == nil {
			return l, nil
		}
		cfg := base
		cfg.Policy, cfg.Options = p, *o
		return Wrap(l, cfg)
	}
}
