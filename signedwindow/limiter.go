package signedwindow

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
)

// Config configures a Limiter.
type Config struct {
	// Policy is the signed policy to enforce: its Name (the tokens' aud),
	// Limit, Window and Options. Required.
	Policy *policy.Policy
	// Options, if set, say whether a window costs a proof of work; default
	// the Policy's Options (what its file said), else none.
	Options *Options
	// Keys sign and verify tokens and key the challenges. Required.
	Keys *KeyRing
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Rand supplies token ids and challenge salts; default crypto/rand. It
	// must be safe for concurrent use.
	Rand io.Reader
	// Replay is the per-instance replay cache of token chains and proofs.
	// Default: a new pow.ReplayCache of pow.DefaultReplayEntries entries,
	// private to this Limiter.
	Replay *pow.ReplayCache
	// Logger, if set, receives at Debug level why a token or proof was
	// treated as absent. Default: no logging.
	Logger *slog.Logger
}

// Limiter enforces one signed policy with no storage: the client carries
// its window's count in a signed token (Edgelimit-Token), and with
// proof_of_work a fresh window costs a proof (Edgelimit-Proof). It is an
// edgelimit.Limiter and edgelimit.Refunder, safe for concurrent use. Allow
// never returns an error: it has no backend to fail.
type Limiter struct {
	name      string
	limit     int64
	window    time.Duration
	tokWindow int64 // window in whole seconds, rounded up: tokens carry seconds
	keys      *KeyRing
	parser    *jwt.Parser
	pow       *pow.Challenger // nil without proof_of_work
	powTTL    time.Duration
	replay    *pow.ReplayCache
	now       func() time.Time
	rand      io.Reader
	log       *slog.Logger
	// ownClock: Config.Now was set, and wins over the engine's Request.At.
	ownClock bool
}

var (
	_ edgelimit.Limiter  = (*Limiter)(nil)
	_ edgelimit.Refunder = (*Limiter)(nil)
	_ edgelimit.Peeker   = (*Limiter)(nil)
)

// New validates cfg and returns a Limiter for its policy.
func New(cfg Config) (*Limiter, error) {
	p := cfg.Policy
	if p == nil {
		return nil, errors.New("signedwindow: Config.Policy is required")
	}
	if cfg.Keys == nil || len(cfg.Keys.keys) == 0 {
		return nil, fmt.Errorf("signedwindow: policy %q: Config.Keys: %w", p.Name, ErrNoKeys)
	}
	if p.Strategy != nil && p.Strategy != Strategy {
		return nil, fmt.Errorf("signedwindow: policy %q has strategy %q, not signed", p.Name, p.Strategy.Name)
	}
	opts, err := options(cfg)
	if err != nil {
		return nil, err
	}
	if !safeString(p.Name) {
		return nil, fmt.Errorf("signedwindow: policy name %q must be printable ASCII without quotes or backslashes", p.Name)
	}
	if p.Limit < 1 {
		return nil, fmt.Errorf("signedwindow: policy %q: limit %d must be at least 1", p.Name, p.Limit)
	}
	if p.Window <= 0 {
		return nil, fmt.Errorf("signedwindow: policy %q: window must be positive", p.Name)
	}
	l := &Limiter{
		name:      p.Name,
		limit:     p.Limit,
		window:    p.Window,
		tokWindow: int64((p.Window + time.Second - 1) / time.Second),
		keys:      cfg.Keys,
		replay:    cfg.Replay,
		now:       cfg.Now,
		rand:      cfg.Rand,
		log:       cfg.Logger,
		ownClock:  cfg.Now != nil,
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.rand == nil {
		l.rand = rand.Reader
	}
	if l.replay == nil {
		l.replay = pow.NewReplayCache(0)
	}
	l.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{"HS256"}), // the algorithm is pinned
		jwt.WithExpirationRequired(),
		jwt.WithAudience(p.Name),
		jwt.WithTimeFunc(l.now),
	)
	if pw := opts.ProofOfWork; pw != nil {
		c, err := pow.New(pow.Config{Secrets: cfg.Keys.secrets(), Bits: pw.Bits, TTL: pw.TTL, Now: l.now, Rand: l.rand, Replay: l.replay})
		if err != nil {
			return nil, fmt.Errorf("signedwindow: policy %q: %w", p.Name, err)
		}
		l.pow, l.powTTL = c, c.TTL()
	}
	return l, nil
}

// NewFactory returns an func(*policy.Policy) (edgelimit.Limiter, error) that builds a Limiter for each
// signed policy from base (whose Policy is ignored), and refuses other
// strategies. A Replay cache set in base is shared by every policy.
func NewFactory(base Config) func(*policy.Policy) (edgelimit.Limiter, error) {
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		if p.Strategy != Strategy {
			return nil, fmt.Errorf("signedwindow: policy %q has strategy %q, not signed", p.Name, p.StrategyName())
		}
		cfg := base
		cfg.Policy = p
		return New(cfg)
	}
}

// Header names of the signed strategy's client state.
const (
	// HeaderToken carries the window token: in the response that admits a
	// request, and back in the client's next request.
	HeaderToken = "Edgelimit-Token"
	// HeaderChallenge carries a proof-of-work challenge in a 429.
	HeaderChallenge = pow.HeaderChallenge
	// HeaderProof carries the client's solution of a challenge.
	HeaderProof = pow.HeaderProof
)

// Limits on the client state headers; a larger value is ignored (absent).
const (
	MaxTokenHeader = 4096
	MaxProofHeader = pow.MaxProofHeader
)

// detailProof is what a 429 with a challenge tells the client to do.
const detailProof = pow.ChallengeDetail

// Allow decides req: see the package documentation. It never returns an
// error; invalid, expired, tampered, replayed or foreign tokens and proofs
// are treated as absent.
func (l *Limiter) Allow(_ context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	return l.decide(l.at(req), req, true), nil
}

// Peek reports what Allow would answer for req, spending nothing: no token
// chain advances, no proof is redeemed, no token is signed. A challenge it
// answers with is as good as Allow's (challenges are stateless).
func (l *Limiter) Peek(_ context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	return l.decide(l.at(req), req, false), nil
}

// at is the instant of req's decision: the Limiter's own clock when one was
// configured, else the engine's reading.
func (l *Limiter) at(req edgelimit.Request) time.Time {
	if l.ownClock || req.At.IsZero() {
		return l.now()
	}
	return req.At
}

// clientState returns the token and proof headers of req, each ignored when
// larger than its bound.
func clientState(req edgelimit.Request) (token, proof string) {
	if req.Header == nil {
		return "", ""
	}
	if t := req.Header.Get(HeaderToken); len(t) <= MaxTokenHeader {
		token = t
	}
	if p := req.Header.Get(HeaderProof); len(p) <= MaxProofHeader {
		proof = p
	}
	return token, proof
}

// decide answers req at now; with spend false it records and signs nothing.
func (l *Limiter) decide(now time.Time, req edgelimit.Request, spend bool) edgelimit.Decision {
	cost := req.Units()
	d := edgelimit.Decision{Policy: l.name, Limit: l.limit, Window: l.window}
	if cost > l.limit {
		// No window can ever admit it; no work can buy it.
		d.Reset, d.RetryAfter = l.window, l.window
		return d
	}
	token, proof := clientState(req)
	sub := subject(req.Key)
	var exhausted *tokenClaims
	if c := l.findToken(now, token, sub); c != nil {
		if c.n+cost <= l.limit {
			exp := c.exp.Unix()
			keep := time.Unix(exp, 0).Add(l.powTTL + time.Second)
			ok := l.replay.Spendable(c.id, c.n, now)
			if ok && spend {
				ok = l.replay.Spend(c.id, c.n, c.n+cost, keep, now)
			}
			if ok {
				d.Allowed = true
				d.Remaining = l.limit - c.n - cost
				d.Reset = time.Unix(exp, 0).Sub(now)
				d.Receipt = edgelimit.Receipt{At: now.UnixNano(), Slot: c.n, ID: receiptID(c.id)}
				if spend {
					d.Response = &edgelimit.Response{Field: edgelimit.Field{Name: HeaderToken, Value: l.keys.keys[0].sign(l.name, sub, c.id, c.nbf.Unix(), exp, c.n+cost)}}
				}
				return d
			}
			l.debug("token treated as absent", ErrReplayed)
		} else {
			exhausted = c
		}
	}
	if l.pow == nil {
		if exhausted != nil {
			// The window is spent; only time (or dropping the token) resets it.
			d.Reset = exhausted.exp.Sub(now)
			d.RetryAfter = d.Reset
			return d
		}
		var id pow.ID
		if spend {
			l.random(id[:])
		}
		return l.mint(d, now, sub, id, cost, spend)
	}
	if id, ok := l.redeem(now, proof, req.Key, cost, spend); ok {
		return l.mint(d, now, sub, id, cost, spend)
	}
	// A proof buys a window: until one comes, nothing is available and
	// there is no effective window to announce (t is left out).
	ch := l.pow.IssueAt(now, req.Key, l.name)
	d.Response = &edgelimit.Response{Field: edgelimit.Field{Name: HeaderChallenge, Value: ch.Value},
		Detail: detailProof, Extension: ch.Extension()}
	return d
}

// mint starts a window worth limit units at now, spending cost of it (and
// signing its token, when spend is set).
func (l *Limiter) mint(d edgelimit.Decision, now time.Time, sub string, id pow.ID, cost int64, spend bool) edgelimit.Decision {
	nbf := now.Unix()
	exp := nbf + l.tokWindow
	d.Allowed = true
	d.Remaining = l.limit - cost
	d.Reset = time.Unix(exp, 0).Sub(now)
	d.Receipt = edgelimit.Receipt{At: now.UnixNano(), Slot: 0, ID: receiptID(id)}
	if spend {
		d.Response = &edgelimit.Response{Field: edgelimit.Field{Name: HeaderToken, Value: l.keys.keys[0].sign(l.name, sub, id, nbf, exp, cost)}}
	}
	return d
}

// findToken returns the claims of the first token in header (a
// comma-separated list) that is valid for this policy and client, or nil.
func (l *Limiter) findToken(now time.Time, header, sub string) *tokenClaims {
	if header == "" {
		return nil
	}
	for i := 0; i < maxCandidates && header != ""; i++ {
		var tok string
		tok, header, _ = strings.Cut(header, ",")
		c, err := l.verify(now, strings.TrimSpace(tok), sub)
		if err == nil {
			return c
		}
		if !errors.Is(err, ErrPolicy) {
			l.debug("token treated as absent", err)
		}
	}
	return nil
}

// redeem spends (or, with spend false, checks) the first proof in header (a
// comma-separated list) that is valid for this policy and client and unspent
// on this instance. The proof's challenge salt names the new window's token
// chain, and spending it is the chain's first spend, so a replayed proof and
// the chain it started share one replay-cache entry.
func (l *Limiter) redeem(now time.Time, header, key string, cost int64, spend bool) (pow.ID, bool) {
	for i := 0; i < maxCandidates && header != ""; i++ {
		var proof string
		proof, header, _ = strings.Cut(header, ",")
		p, err := l.pow.VerifyAt(now, strings.TrimSpace(proof), key, l.name)
		if err != nil {
			if !errors.Is(err, pow.ErrSignature) { // another policy's proof is not news
				l.debug("proof treated as absent", err)
			}
			continue
		}
		ok := l.replay.Spendable(p.ID(), 0, now)
		if ok && spend {
			ok = l.replay.Spend(p.ID(), 0, cost, p.Expires.Add(time.Duration(l.tokWindow)*time.Second+time.Second), now)
		}
		if ok {
			return p.ID(), true
		}
		l.debug("proof treated as absent", pow.ErrReplayed)
	}
	return pow.ID{}, false
}

// Refund gives back what Allow spent for d, when another policy on the
// route denied the request (the engine then does not send d's token, so the
// client presents the same token or proof again): it undoes exactly d's
// spend in the replay cache — the span of d's token chain that d advanced
// (d.Receipt: the chain and the count before d) — if nothing was spent
// after it, and nothing else. It never fails.
func (l *Limiter) Refund(_ context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	if !d.Allowed || d.Receipt == (edgelimit.Receipt{}) {
		return nil
	}
	from := d.Receipt.Slot
	var id pow.ID
	copy(id[:], d.Receipt.ID[:])
	l.replay.Unspend(id, from, from+req.Units())
	return nil
}

// receiptID puts a chain id in a Receipt.
func receiptID(id pow.ID) (r [16]byte) {
	copy(r[:], id[:])
	return r
}

// Verify checks one token for this policy and the client key at the
// current time, without spending it, and returns its claims or the reason
// it would be treated as absent. Allow never reports these reasons; Verify
// is for diagnostics and tests.
func (l *Limiter) Verify(token, key string) (Claims, error) {
	c, err := l.verify(l.now(), token, subject(key))
	if err != nil {
		return Claims{}, err
	}
	return Claims{Policy: l.name, Subject: c.wantSub, ID: c.id, Start: c.nbf.Time, Expires: c.exp.Time, Count: c.n}, nil
}

// verify parses and checks one token with golang-jwt: HS256 only, exp
// required, aud = policy; then the binding to the client, the window and the
// count.
func (l *Limiter) verify(now time.Time, tok, sub string) (*tokenClaims, error) {
	switch {
	case tok == "":
		return nil, ErrNoToken
	case len(tok) > MaxTokenLength:
		return nil, ErrTooLarge
	}
	c := &tokenClaims{wantAud: l.name, wantSub: sub}
	if _, err := l.parser.ParseWithClaims(tok, c, l.keys.keyFunc); err != nil {
		return nil, tokenError(err)
	}
	// jwt checked exp and nbf with Config.Now; check them again at the
	// instant of this decision.
	switch {
	case !now.Before(c.exp.Time):
		return nil, ErrExpired
	case now.Before(c.nbf.Time):
		return nil, ErrNotYetValid
	case c.exp.Unix()-c.nbf.Unix() != l.tokWindow:
		return nil, ErrWindow
	case c.n < 1:
		return nil, ErrMalformed
	}
	return c, nil
}

// tokenError maps a golang-jwt error to this package's causes.
func tokenError(err error) error {
	for _, e := range []error{ErrPolicy, ErrSubject, ErrUnknownKey} {
		if errors.Is(err, e) {
			return e
		}
	}
	switch {
	case errors.Is(err, jwt.ErrSignatureInvalid):
		return ErrSignature
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return ErrAlgorithm // an alg other than HS256, or none at all
	case errors.Is(err, jwt.ErrTokenExpired):
		return ErrExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return ErrNotYetValid
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return ErrPolicy
	}
	return ErrMalformed
}

func (l *Limiter) random(b []byte) {
	if _, err := io.ReadFull(l.rand, b); err != nil {
		_, _ = rand.Read(b) // crypto/rand never fails
	}
}

func (l *Limiter) debug(msg string, reason error) {
	if l.log != nil {
		l.log.Debug("signedwindow: "+msg, slog.String("policy", l.name), slog.String("reason", reason.Error()))
	}
}

// subject is the sub claim for a client key: the key itself when it is
// short printable ASCII without quotes (the engine's 22-character hashes
// always are), else a hash of it.
func subject(key string) string {
	if len(key) <= 128 && safeString(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "~" + base64.RawURLEncoding.EncodeToString(sum[:16])
}

func safeString(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
