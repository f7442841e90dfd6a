package edgelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/edgelimit/edgelimit/internal/jsonenc"
	"github.com/edgelimit/edgelimit/internal/keyhash"
	isecret "github.com/edgelimit/edgelimit/internal/secret"
	"github.com/edgelimit/edgelimit/internal/urlpath"
	"github.com/edgelimit/edgelimit/policy"
)

// Config configures an Engine.
type Config struct {
	// Policies is the loaded policy file. Required.
	Policies *policy.File
	// Limiters builds each policy's Limiter. Required; setup.Limiters
	// builds it from the backends of the strategies a program links.
	Limiters func(p *policy.Policy) (Limiter, error)
	// HashSecret keys the hash that replaces raw client keys in storage. At
	// least 32 bytes, and the same on every instance sharing a store. Nil
	// generates a random one, which is only right for a single process.
	HashSecret []byte
	// Logger receives store errors and rejected input; default slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called once per policy decision (for metrics).
	Observe func(Event)
	// ObserveBreaker, if set, is called when a store's circuit breaker
	// opens, half-opens or closes (for metrics: metrics.EMF has one). The
	// engine logs each change as well. Each policy's store_breaker says
	// when it opens; the breaker of a store whose calls fail stops them
	// taking their whole budget on every request.
	ObserveBreaker func(BreakerEvent)
	// Now is the engine's clock: read once per request, it is the instant
	// every policy decides at (Request.At) and the start of the request's
	// time budget; default time.Now.
	Now func() time.Time
	// Overrides holds the per-key limits operators set at run time; it is
	// required when a policy has overrides: true.
	Overrides OverrideStore
	// Getenv reads the environment variables allow and deny lists name
	// (env:); default os.Getenv.
	Getenv func(string) string
	// Sleep waits d for a request a policy with max_delay admitted for a
	// later turn, or until ctx ends, and then returns ctx's error; default
	// a time.Timer. Tests inject one that moves their clock (Now) instead.
	Sleep func(ctx context.Context, d time.Duration) error
	// WaitMargin is the time a request's deadline (its context's: on
	// Lambda, the invocation's) must still leave after a max_delay wait,
	// for the handler; a wait that would leave less is not begun: the
	// request is answered 429 at once and its units given back. Default
	// 1s.
	WaitMargin time.Duration
	// Bans keeps the bans of the policies with a ban field, shared by
	// every instance; it is required when a policy has one (bans.NewMemory,
	// bans/dynamostore.New; setup.Bans chooses by the backends).
	Bans BanStore
}

// Event describes one policy's part in one request, for metrics.
type Event struct {
	Route    string
	Policy   string
	Strategy string
	// Allowed is the policy's own answer: it admitted the request (or, when
	// Peeked, would have).
	Allowed bool
	Shadow  bool
	// Peeked: the policy spent nothing for the request, because another
	// denied it: it was asked without spending (Peeker), or it was a member
	// of an atomic batch that another member denied.
	Peeked bool
	// Refunded: the policy admitted and spent, another denied, and what it
	// spent was given back.
	Refunded bool
	// Degraded: the store failed and on_store_error decided.
	Degraded bool
	// StoreError is the backend's error, if any (already logged).
	StoreError error
	// RefundError is why a refund could not land (already logged): the
	// units it should have given back stay spent until their window ends.
	RefundError error
	// OverrideError is why the policy's override read failed (already
	// logged; overrides: true): a failure of the policy's store, decided
	// by on_store_error, unless the policy fails open with an override
	// this instance knows, which its limiter then applied.
	OverrideError error
	// Latency is how long the limiter took.
	Latency time.Duration
	// Reason says why a decision was not made by counting at request time,
	// or is "": "after-response" (charged or refunded once the response was
	// known), "allow-list" and "deny-list" (a list decided, no limiter was
	// asked), "degraded" (the store failed; on_store_error decided), or
	// "breaker-open" (the store's circuit breaker was open, so the store
	// was not asked and on_store_error decided at once), or what the
	// limiter said (Decision.Reason: "soft-threshold", "proof-of-work"),
	// or "banned" (the policy's ban refused the key; see policy.Ban).
	Reason string
	// Context is the request's context, for what an observer reads from
	// its values: metrics.EMF takes the Lambda request id from it, so that
	// a metric line and the request's log lines share the requestId. It
	// is only valid during the call.
	Context context.Context
	// Key is the policy's hashed client key: the value its limiter was
	// given and a store keeps (Engine.KeyOf of the raw key), never the raw
	// key; "" for a list's decision. metrics.EMF writes it as the KeyHash
	// property, for a view of the keys being limited. Like Context, it is
	// only valid during the call: copy it (strings.Clone) to keep it.
	Key string
	// Wait is how long the request waited for its turn (max_delay) before
	// it was served, or, with Reason "wait-cut", before the wait was cut
	// short (the request's context ended or its deadline was too near)
	// and the request denied.
	Wait time.Duration
}

// Engine decides requests against a policy file. It is the one core behind
// every adapter: adapters translate their event into an Input, call Decide
// and render the Verdict.
type Engine struct {
	file     *policy.File
	policies []*compiled
	routes   []routeRef
	hasher   *keyhash.Hasher
	local    *keyhash.Local
	log      *slog.Logger
	observe  func(Event)
	// observeBreaker is Config.ObserveBreaker; overrideBreaker is the
	// breaker of the override store (nil without one).
	observeBreaker  func(BreakerEvent)
	overrideBreaker *breaker
	now             func() time.Time
	// realClock: now is time.Now, so the request's time budget can start
	// from the reading that times it.
	realClock bool
	legacy    bool
	overrides OverrideStore
	lists     []*compiledList
	// sets and bigSets hold the route sets met so far: by the mask of
	// their policies, or by their list in a file of more than 64.
	sets    routeSets[uint64]
	bigSets routeSets[string]
	// sleep and waitMargin are Config.Sleep and Config.WaitMargin, with
	// their defaults.
	sleep      func(context.Context, time.Duration) error
	waitMargin time.Duration
	// bans is Config.Bans, banBreaker its breaker (ban.go).
	bans       BanStore
	banBreaker *breaker
}

// compiled is a policy with its limiter and what rendering it needs.
type compiled struct {
	*policy.Policy
	index   int
	limiter Limiter
	batch   BatchLimiter
	refund  Refunder
	peek    Peeker
	// local decides while the store fails (on_store_error: local);
	// follower is local, when it hears what the limiter decides.
	local    Limiter
	follower Follower
	// breaker is the circuit breaker of the policy's store (shared with
	// the policies on the same store), nil for store_breaker: off.
	breaker *breaker
	// rItem is the start of its RateLimit member (`"name";r=`); q, w and
	// item its default RateLimit-Policy member, for a decision whose Limit
	// and Window are q and w (and for one the store could not make).
	rItem string
	q     int64
	w     time.Duration
	item  string
	// localKeys: the policy's keys are hashed with the in-process hash
	// (keyhash.Local), not HMAC (see localKeys).
	localKeys bool
	// denyHead and jsonName make the body of a 429 only this policy
	// decides (render): its start, up to the wait, and the name as JSON.
	denyHead, jsonName string
	// limitVals is q as the X-RateLimit-Limit value, shared by every
	// response (never changed).
	limitVals []string
	// overrides caches this policy's per-key overrides, or is nil.
	overrides *overrideCache
	// deferred: the policy settles after the response (charge: response,
	// or charge_status): the request reserves its units, and settler
	// settles them then (settle.go). finisher hears how an admitted
	// request ended (an in-flight slot). finishes: Verdict.Finish has
	// something to do for the policy.
	deferred bool
	settler  Settler
	finisher Finisher
	finishes bool
	// bans caches this policy's bans, or is nil (no ban field).
	bans *banCache
}

type routeRef struct {
	route  policy.Route
	policy int
}

// New validates cfg and builds every policy's limiter.
func New(cfg Config) (*Engine, error) {
	if cfg.Policies == nil {
		return nil, errors.New("edgelimit: Config.Policies is required")
	}
	if cfg.Limiters == nil {
		return nil, errors.New("edgelimit: Config.Limiters is required")
	}
	secret := cfg.HashSecret
	if secret == nil {
		secret = isecret.Random()
	}
	hasher, err := keyhash.New(secret)
	if err != nil {
		return nil, fmt.Errorf("edgelimit: HashSecret: %w", err)
	}
	local, err := keyhash.NewLocal(secret)
	if err != nil {
		return nil, fmt.Errorf("edgelimit: HashSecret: %w", err)
	}
	e := &Engine{
		file:           cfg.Policies,
		hasher:         hasher,
		local:          local,
		log:            cfg.Logger,
		observe:        cfg.Observe,
		observeBreaker: cfg.ObserveBreaker,
		now:            cfg.Now,
		legacy:         cfg.Policies.LegacyHeaders,
		overrides:      cfg.Overrides,
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.now == nil {
		e.now, e.realClock = time.Now, true
	}
	e.sleep, e.waitMargin = waitConfig(cfg)
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if e.lists, err = compileLists(cfg.Policies, getenv); err != nil {
		return nil, err
	}
	for i, p := range cfg.Policies.Policies {
		l, err := cfg.Limiters(p)
		if err != nil {
			return nil, fmt.Errorf("edgelimit: policy %q: %w", p.Name, err)
		}
		if l == nil {
			return nil, fmt.Errorf("edgelimit: policy %q: factory returned no limiter", p.Name)
		}
		c := &compiled{Policy: p, index: i, limiter: l, localKeys: localKeys(p, l)}
		if b, ok := l.(BatchLimiter); ok && b.BatchKey() != "" {
			c.batch = b
		}
		c.refund, _ = l.(Refunder)
		c.peek, _ = l.(Peeker)
		c.settler, _ = ability[Settler](l)
		c.finisher, _ = ability[Finisher](l)
		c.deferred = p.ChargeAfter || len(p.ChargeStatus) > 0
		switch {
		case c.deferred && (c.settler == nil || c.refund == nil):
			return nil, fmt.Errorf("edgelimit: policy %q settles after the response, which needs a limiter that can settle and refund (edgelimit.Settler, edgelimit.Refunder); %T cannot", p.Name, l)
		case len(p.RefundStatus) > 0 && c.refund == nil:
			return nil, fmt.Errorf("edgelimit: policy %q has refund_status, which needs a limiter that can refund (edgelimit.Refunder); %T cannot", p.Name, l)
		}
		c.finishes = c.deferred || len(p.RefundStatus) > 0 || c.finisher != nil
		if p.OnStoreError == policy.FailLocal {
			lz, ok := l.(Localizer)
			if !ok {
				return nil, fmt.Errorf("edgelimit: policy %q: on_store_error local needs a limiter with an in-process twin (a Local method); %T has none", p.Name, l)
			}
			if c.local, err = lz.Local(); err != nil {
				return nil, fmt.Errorf("edgelimit: policy %q: in-process twin: %w", p.Name, err)
			}
			c.follower, _ = ability[Follower](c.local)
		}
		if p.Overrides {
			if cfg.Overrides == nil {
				return nil, fmt.Errorf("edgelimit: policy %q has overrides: true, but Config.Overrides is nil (where are the overrides kept?)", p.Name)
			}
			c.overrides = newOverrideCache()
		}
		c.rItem = strconv.Quote(p.Name) + ";r="
		c.q, c.w = advertised(p, l)
		c.item = policyItem(p.Name, c.q, c.w)
		c.limitVals = []string{strconv.FormatInt(max(c.q, 0), 10)}
		c.denyHead, c.jsonName = denyHead(p.Name), string(jsonenc.AppendString(nil, p.Name))
		e.policies = append(e.policies, c)
		for _, r := range p.Routes {
			e.routes = append(e.routes, routeRef{route: r, policy: i})
		}
	}
	if err := e.breakers(); err != nil {
		return nil, err
	}
	if err := e.compileBans(cfg.Bans); err != nil {
		return nil, err
	}
	return e, nil
}

// Policies returns the engine's policy file.
func (e *Engine) Policies() *policy.File { return e.file }

// Limiter returns the limiter built for the named policy, or nil.
func (e *Engine) Limiter(policy string) Limiter {
	for _, c := range e.policies {
		if c.Name == policy {
			return c.limiter
		}
	}
	return nil
}

// advertised is the quota and window a policy announces for a decision its
// limiter could not make (the store failed): what the limiter says its
// decisions announce (a bucket: its burst over the time it takes to fill),
// or the policy's limit and window.
func advertised(p *policy.Policy, l Limiter) (int64, time.Duration) {
	if q, ok := l.(Quoter); ok {
		return q.Quota()
	}
	return p.Limit, p.Window
}

// Decide evaluates every policy guarding the request's route. It never
// panics on client input and never returns a 5xx for it: malformed input is
// a 400, a store failure follows each policy's on_store_error. The Verdict
// is the caller's until it calls Release (see Verdict): the middleware
// releases it after the response, and in the steady state a decision
// allocates only the request's own memory (its context, hashed keys and
// header values, one allocation).
func (e *Engine) Decide(ctx context.Context, in *Input) *Verdict {
	method := in.Method
	path, reason, detail := requestLine(method, in.Path)
	if reason != "" {
		v := newVerdict(0)
		e.log.LogAttrs(ctx, slog.LevelInfo, "edgelimit: rejected malformed request", slog.String("reason", reason))
		badRequest(v, detail)
		return v
	}
	template := templatePath(in.Route)
	if e.lists != nil {
		if lv := e.checkLists(ctx, in, method, path, template); lv != nil {
			return lv
		}
	}
	rs := e.match(method, path, template)
	if rs == nil {
		return unguarded
	}
	v := rs.verdict()
	v.Route = rs.label
	// The request's own memory: its context, keys and header values.
	v.mem = new(reqMem)
	slots := v.slots
	for i := range slots {
		slots[i].bud = &v.budgets[i]
	}
	if e.requests(ctx, rs, in, v, slots) {
		e.evaluate(ctx, rs, v, slots)
		e.render(rs, v, slots)
	}
	return v
}

// requestLine checks the method and path of a request and returns the
// canonical path, or the private reason and the public detail of a 400.
func requestLine(method, path string) (canonical, reason, detail string) {
	if reason := checkRequestLine(method, path); reason != "" {
		return "", reason, "The request line is malformed."
	}
	if canonical = urlpath.Canonical(path); canonical == "" {
		return "", "path does not decode", "The request path is malformed."
	}
	return canonical, "", ""
}

func checkRequestLine(method, path string) string {
	if method == "" || len(method) > maxMethodLen {
		return "method is empty or too long"
	}
	for i := 0; i < len(method); i++ {
		if c := method[i]; c < 'A' || c > 'Z' {
			return "method is not an upper-case token"
		}
	}
	if path == "" || path[0] != '/' {
		return "path does not start with /"
	}
	if len(path) > maxPathLength {
		return "path is too long"
	}
	if !utf8.ValidString(path) {
		return "path is not UTF-8"
	}
	return ""
}

// Limits on client input; larger values are treated as bad input.
const (
	// maxPathLength bounds a request path; longer is a 400.
	maxPathLength = 8192
	maxMethodLen  = 16
)
