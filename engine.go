package edgelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Header names edgelimit reads and writes.
const (
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
	HeaderRetryAfter      = "Retry-After"
	HeaderLegacyLimit     = "X-RateLimit-Limit"
	HeaderLegacyRemaining = "X-RateLimit-Remaining"
	HeaderLegacyReset     = "X-RateLimit-Reset"
	HeaderToken           = "Edgelimit-Token"
	HeaderChallenge       = "Edgelimit-Challenge"
	HeaderProof           = "Edgelimit-Proof"
	HeaderContentType     = "Content-Type"
)

// Limits on client input; larger values are treated as bad input or absent.
const (
	MaxTokenHeader = 4096 // Edgelimit-Token; larger is ignored (absent)
	MaxProofHeader = 1024 // Edgelimit-Proof; larger is ignored (absent)
	MaxPathLength  = 8192
	maxMethodLen   = 16
)

// Config configures an Engine.
type Config struct {
	// Policies is the loaded policy file. Required.
	Policies *PolicyFile
	// Limiters builds each policy's Limiter. Required; setup.Factory knows
	// every strategy.
	Limiters Factory
	// HashSecret keys the hash that replaces raw client keys in storage. At
	// least 32 bytes, and the same on every instance sharing a store. Nil
	// generates a random one, which is only right for a single process.
	HashSecret []byte
	// Logger receives store errors and rejected input; default slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called once per policy decision (for metrics).
	Observe func(Event)
	// Now is the clock used to time store calls; default time.Now.
	Now func() time.Time
}

// Event describes one policy decision, for metrics.
type Event struct {
	Route    string
	Policy   string
	Strategy string
	Allowed  bool
	Shadow   bool
	// Degraded: the store failed and on_store_error decided.
	Degraded bool
	// StoreError is the backend's error, if any (already logged).
	StoreError error
	// Latency is how long the limiter took.
	Latency time.Duration
}

// Engine decides requests against a policy file. It is the one core behind
// every adapter: adapters translate their event into an Input, call Decide
// and render the Verdict.
type Engine struct {
	file     *PolicyFile
	policies []*compiled
	routes   []routeRef
	hasher   *KeyHasher
	log      *slog.Logger
	observe  func(Event)
	now      func() time.Time
	// realClock: now is time.Now, so a store call's deadline can be
	// computed from the reading that times it.
	realClock bool
	legacy    bool
	sets      sync.Map // uint64 mask -> *routeSet
	bigSets   sync.Map // string mask -> *routeSet, for files with > 64 policies
}

type compiled struct {
	*Policy
	index   int
	limiter Limiter
	batch   BatchLimiter
	refund  Refunder
	// local decides while the store fails (on_store_error: local).
	local Limiter
	// item is this policy's RateLimit-Policy list member; rItem the start
	// of its RateLimit member (`"name";r=`).
	item     string
	rItem    string
	limitStr string
}

type routeRef struct {
	route  Route
	policy int
}

// member is a policy of a route set and its slot: the index of its request,
// outcome and Decision in this route's per-request arrays.
type member struct {
	*compiled
	slot int
}

type routeSet struct {
	label    string
	policies []member
	// policyHeader is the RateLimit-Policy value (non-shadow policies).
	policyHeader string
	// phases: plain limiters first, then each batch group (atomic), so a
	// denial never spends an exact quota and soft ones are refunded.
	plain  []member
	groups [][]member
	// clientState: some policy reads the Edgelimit-Token and
	// Edgelimit-Proof headers (only the signed strategy does), so they are
	// looked up; other routes skip the two header lookups.
	clientState bool
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
		secret = RandomSecret()
	}
	hasher, err := NewKeyHasher(secret)
	if err != nil {
		return nil, fmt.Errorf("edgelimit: HashSecret: %w", err)
	}
	e := &Engine{
		file:    cfg.Policies,
		hasher:  hasher,
		log:     cfg.Logger,
		observe: cfg.Observe,
		now:     cfg.Now,
		legacy:  cfg.Policies.LegacyHeaders,
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.now == nil {
		e.now, e.realClock = time.Now, true
	}
	for i, p := range cfg.Policies.Policies {
		l, err := cfg.Limiters(p)
		if err != nil {
			return nil, fmt.Errorf("edgelimit: policy %q: %w", p.Name, err)
		}
		if l == nil {
			return nil, fmt.Errorf("edgelimit: policy %q: factory returned no limiter", p.Name)
		}
		c := &compiled{Policy: p, index: i, limiter: l}
		if b, ok := l.(BatchLimiter); ok && b.BatchKey() != "" {
			c.batch = b
		}
		c.refund, _ = l.(Refunder)
		if p.OnStoreError == FailLocal {
			lz, ok := l.(Localizer)
			if !ok {
				return nil, fmt.Errorf("edgelimit: policy %q: on_store_error local needs a limiter with an in-process twin (edgelimit.Localizer); %T has none", p.Name, l)
			}
			if c.local, err = lz.Local(); err != nil {
				return nil, fmt.Errorf("edgelimit: policy %q: in-process twin: %w", p.Name, err)
			}
		}
		c.item = policyItem(p)
		c.rItem = strconv.Quote(p.Name) + ";r="
		q, _ := advertised(p)
		c.limitStr = strconv.FormatInt(q, 10)
		e.policies = append(e.policies, c)
		for _, r := range p.Routes {
			e.routes = append(e.routes, routeRef{route: r, policy: i})
		}
	}
	return e, nil
}

// Policies returns the engine's policy file.
func (e *Engine) Policies() *PolicyFile { return e.file }

// Limiter returns the limiter built for the named policy, or nil.
func (e *Engine) Limiter(policy string) Limiter {
	for _, c := range e.policies {
		if c.Name == policy {
			return c.limiter
		}
	}
	return nil
}

func policyItem(p *Policy) string {
	q, window := advertised(p)
	w := int64((window + time.Second - 1) / time.Second)
	return strconv.Quote(p.Name) + ";q=" + strconv.FormatInt(q, 10) + ";w=" + strconv.FormatInt(w, 10)
}

// advertised is the quota and window a policy announces in RateLimit-Policy
// and X-RateLimit-Limit. A bucket (gcra, kv) holds up to its burst, so it
// announces the burst over the time the bucket takes to fill: 10/s with
// burst 20 is q=20;w=2. Remaining (r) then never exceeds q.
func advertised(p *Policy) (int64, time.Duration) {
	bucket := p.Algorithm == AlgorithmGCRA || p.Strategy == StrategyKV
	if !bucket || p.Limit <= 0 || p.Capacity() == p.Limit {
		return p.Limit, p.Window
	}
	c := p.Capacity()
	return c, time.Duration(float64(p.Window) * float64(c) / float64(p.Limit))
}

// Field is one response header.
type Field struct{ Name, Value string }

// Verdict is the engine's answer for one request. It is read-only: Decide
// may return the same Verdict for many requests (those no policy covers).
type Verdict struct {
	// Allowed: run the handler and add Header() to its response.
	Allowed bool
	// Status is 0 when Allowed, else the status to answer with (400, 429, 503).
	Status int
	// Route labels the matched policies for logs and metrics ("" if none).
	Route string
	// Decisions has one entry per policy guarding the route, in file order.
	// A policy that was not evaluated (a shadow policy without its key, or
	// one skipped because another denied first) has an empty Policy.
	Decisions []Decision
	// Body is the problem+json body when !Allowed.
	Body   []byte
	fields [6]Field
	n      int
	more   []Field
	// decBuf, allocated with the Verdict, backs Decisions.
	decBuf []Decision
}

// Header returns the header fields to send, in order.
func (v *Verdict) Header() []Field {
	if v.more != nil {
		return v.more
	}
	return v.fields[:v.n]
}

func (v *Verdict) add(name, value string) {
	if v.more == nil && v.n < len(v.fields) {
		v.fields[v.n] = Field{name, value}
		v.n++
		return
	}
	if v.more == nil {
		v.more = append(make([]Field, 0, 2*len(v.fields)), v.fields[:v.n]...)
	}
	v.more = append(v.more, Field{name, value})
}

// unguarded is the Verdict of every request no policy covers: allowed, no
// headers. Shared, so callers must treat Verdicts as read-only.
var unguarded = &Verdict{Allowed: true}

// Decide evaluates every policy guarding the request's route. It never
// panics on client input and never returns a 5xx for it: malformed input is
// a 400, a store failure follows each policy's on_store_error.
func (e *Engine) Decide(ctx context.Context, in *Input) *Verdict {
	return e.decide(ctx, in)
}

// newVerdict allocates a Verdict together with room for n Decisions, in
// one allocation, for routes of up to 16 policies.
func newVerdict(n int) *Verdict {
	switch {
	case n <= 1:
		return verdictWith(func(d *[1]Decision) []Decision { return d[:] })
	case n <= 2:
		return verdictWith(func(d *[2]Decision) []Decision { return d[:] })
	case n <= 3:
		return verdictWith(func(d *[3]Decision) []Decision { return d[:] })
	case n <= 4:
		return verdictWith(func(d *[4]Decision) []Decision { return d[:] })
	case n <= 6:
		return verdictWith(func(d *[6]Decision) []Decision { return d[:] })
	case n <= 8:
		return verdictWith(func(d *[8]Decision) []Decision { return d[:] })
	case n <= 12:
		return verdictWith(func(d *[12]Decision) []Decision { return d[:] })
	case n <= 16:
		return verdictWith(func(d *[16]Decision) []Decision { return d[:] })
	}
	return &Verdict{}
}

func verdictWith[A any](slice func(*A) []Decision) *Verdict {
	b := new(struct {
		v Verdict
		d A
	})
	b.v.decBuf = slice(&b.d)
	return &b.v
}

func (e *Engine) decide(ctx context.Context, in *Input) *Verdict {
	method := in.Method
	path, reason, detail := requestLine(method, in.Path)
	if reason != "" {
		v := newVerdict(0)
		e.log.LogAttrs(ctx, slog.LevelInfo, "edgelimit: rejected malformed request", slog.String("reason", reason))
		e.badRequest(v, detail)
		return v
	}
	rs := e.match(method, path)
	if rs == nil {
		return unguarded
	}
	n := len(rs.policies)
	v := newVerdict(n)
	v.Route = rs.label
	// Per-request scratch lives on the stack for files of up to
	// stackPolicies policies.
	var reqBuf [stackPolicies]Request
	var outBuf [stackPolicies]outcome
	var reqs []Request
	var out []outcome
	if n <= stackPolicies {
		reqs, out = reqBuf[:n], outBuf[:n]
	} else {
		reqs, out = make([]Request, n), make([]outcome, n)
	}
	if e.requests(ctx, rs, in, v, reqs) {
		e.evaluate(ctx, rs, reqs, out, v)
	}
	return v
}

// stackPolicies is the largest number of policies on one route whose
// per-request scratch is kept on the stack.
const stackPolicies = 16

// requestLine checks the method and path of a request and returns the
// cleaned path, or the private reason and the public detail of a 400.
func requestLine(method, path string) (clean, reason, detail string) {
	if reason := checkRequestLine(method, path); reason != "" {
		return "", reason, "The request line is malformed."
	}
	if clean = CleanPath(path); clean == "" {
		return "", "path does not decode", "The request path is malformed."
	}
	return clean, "", ""
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
	if len(path) > MaxPathLength {
		return "path is too long"
	}
	if !utf8.ValidString(path) {
		return "path is not UTF-8"
	}
	return ""
}

// match returns the set of policies whose routes match, or nil.
func (e *Engine) match(method, path string) *routeSet {
	if len(e.policies) <= 64 {
		var mask uint64
		for _, r := range e.routes {
			if r.route.Matches(method, path) {
				mask |= 1 << uint(r.policy)
			}
		}
		if mask == 0 {
			return nil
		}
		if rs, ok := e.sets.Load(mask); ok {
			return rs.(*routeSet)
		}
		rs := e.newRouteSet(method, path)
		e.sets.Store(mask, rs)
		return rs
	}
	var key []byte
	for _, r := range e.routes {
		if r.route.Matches(method, path) {
			key = strconv.AppendInt(key, int64(r.policy), 36)
			key = append(key, ',')
		}
	}
	if key == nil {
		return nil
	}
	if rs, ok := e.bigSets.Load(string(key)); ok {
		return rs.(*routeSet)
	}
	rs := e.newRouteSet(method, path)
	e.bigSets.Store(string(key), rs)
	return rs
}

func (e *Engine) newRouteSet(method, path string) *routeSet {
	rs := &routeSet{}
	var best Route
	bestScore := -1
	seen := map[int]bool{}
	var policies []*compiled
	for _, r := range e.routes {
		if !r.route.Matches(method, path) {
			continue
		}
		if s := r.route.specificity(); s > bestScore {
			best, bestScore = r.route, s
		}
		if !seen[r.policy] {
			seen[r.policy] = true
			policies = append(policies, e.policies[r.policy])
		}
	}
	slices.SortFunc(policies, func(a, b *compiled) int { return a.index - b.index })
	for slot, c := range policies {
		rs.policies = append(rs.policies, member{c, slot})
	}
	rs.label = best.String()
	var items []string
	groups := map[string]int{}
	for _, c := range rs.policies {
		if c.Strategy == StrategySigned {
			rs.clientState = true
		}
		if !c.Shadow {
			items = append(items, c.item)
		}
		if c.batch != nil && !c.Shadow {
			k := c.batch.BatchKey()
			gi, ok := groups[k]
			if !ok {
				gi = len(rs.groups)
				groups[k] = gi
				rs.groups = append(rs.groups, nil)
			}
			rs.groups[gi] = append(rs.groups[gi], c)
			continue
		}
		rs.plain = append(rs.plain, c)
	}
	rs.policyHeader = strings.Join(items, ", ")
	return rs
}

// requests fills each policy's Request in reqs, or renders a 400 for a
// missing or unusable key and reports false.
func (e *Engine) requests(ctx context.Context, rs *routeSet, in *Input, v *Verdict, reqs []Request) bool {
	var token, proof string
	if rs.clientState && in.Header != nil {
		if t := in.Header.Get(HeaderToken); len(t) <= MaxTokenHeader {
			token = t
		}
		if p := in.Header.Get(HeaderProof); len(p) <= MaxProofHeader {
			proof = p
		}
	}
	var buf [96]byte
	for _, c := range rs.policies {
		raw, err := rawKey(c.Policy, in, buf[:0])
		if err != nil {
			if c.Shadow {
				continue // never block for a shadow policy
			}
			e.log.LogAttrs(ctx, slog.LevelInfo, "edgelimit: request without a usable key",
				slog.String("policy", c.Name), slog.String("route", rs.label), slog.String("reason", err.Error()))
			what := "a usable client key"
			switch {
			case c.Key.Kind == KeyHeader:
				what = "the " + c.Key.Name + " header"
			case c.Key.Kind == KeyClaim:
				what = "an authorizer claim " + strconv.Quote(c.Key.Name)
			case c.Key.Kind == KeyIP:
				what = "a valid source address"
			}
			if errors.Is(err, errBadKey) && c.Key.Kind != KeyIP {
				e.badRequest(v, "This endpoint requires "+what+" of at most "+strconv.Itoa(MaxKeyLength)+" bytes of UTF-8.")
			} else {
				e.badRequest(v, "This endpoint requires "+what+".")
			}
			return false
		}
		reqs[c.slot] = Request{Key: e.hasher.Hash(c.Name, raw), Cost: c.Cost, Token: token, Proof: proof}
	}
	return true
}

type outcome uint8

const (
	notEvaluated outcome = iota
	allowed
	denied
	failedClosed
)

func (e *Engine) evaluate(ctx context.Context, rs *routeSet, reqs []Request, out []outcome, v *Verdict) {
	if n := len(rs.policies); n <= len(v.decBuf) {
		v.Decisions = v.decBuf[:n:n]
	} else {
		v.Decisions = make([]Decision, n)
	}
	blocked := false
	for _, c := range rs.plain {
		if reqs[c.slot].Key == "" {
			continue // shadow policy without a key
		}
		d, o := e.allowOne(ctx, rs, c.compiled, reqs[c.slot])
		v.Decisions[c.slot], out[c.slot] = d, o
		if o != allowed && !c.Shadow {
			blocked = true
		}
	}
	var spentGroups [][]member
	for _, g := range rs.groups {
		if blocked {
			break
		}
		if len(g) == 1 {
			c := g[0]
			d, o := e.allowOne(ctx, rs, c.compiled, reqs[c.slot])
			v.Decisions[c.slot], out[c.slot] = d, o
			blocked = o != allowed
		} else {
			blocked = e.allowGroup(ctx, rs, g, reqs, v.Decisions, out)
		}
		if !blocked {
			spentGroups = append(spentGroups, g)
		}
	}
	if blocked {
		e.refund(ctx, rs.plain, reqs, v.Decisions, out)
		for _, g := range spentGroups {
			e.refund(ctx, g, reqs, v.Decisions, out)
		}
	}
	e.render(rs, v, out, blocked)
}

// allowOne asks one limiter within the policy's time budget and applies
// on_store_error to a failure.
func (e *Engine) allowOne(ctx context.Context, rs *routeSet, c *compiled, req Request) (Decision, outcome) {
	start := e.now()
	cctx := e.budget(ctx, start, c.StoreTimeout)
	d, err := c.limiter.Allow(cctx, req)
	lat := e.since(start, err)
	cctx.stop()
	if err != nil {
		return e.storeFailed(ctx, rs, c, req, err, lat)
	}
	d.Policy = c.Name
	e.emit(rs, c, d, nil, lat)
	return d, decisionOutcome(c, d)
}

func (e *Engine) allowGroup(ctx context.Context, rs *routeSet, g []member, reqs []Request, ds []Decision, out []outcome) (blocked bool) {
	items := make([]BatchItem, len(g))
	budget := time.Duration(0)
	for i, c := range g {
		items[i] = BatchItem{Limiter: c.batch, Request: reqs[c.slot]}
		budget = max(budget, c.StoreTimeout)
	}
	start := e.now()
	cctx := e.budget(ctx, start, budget)
	got, err := g[0].batch.AllowBatch(cctx, items)
	if err == nil && len(got) != len(g) {
		err = fmt.Errorf("edgelimit: AllowBatch returned %d decisions for %d requests", len(got), len(g))
	}
	lat := e.since(start, err)
	cctx.stop()
	for i, c := range g {
		if err != nil {
			ds[c.slot], out[c.slot] = e.storeFailed(ctx, rs, c.compiled, reqs[c.slot], err, lat)
		} else {
			d := got[i]
			d.Policy = c.Name
			e.emit(rs, c.compiled, d, nil, lat)
			ds[c.slot], out[c.slot] = d, decisionOutcome(c.compiled, d)
		}
		if out[c.slot] != allowed {
			blocked = true
		}
	}
	if err == nil && blocked {
		// Nothing in the batch was spent: mark allowed members as not to refund.
		for _, c := range g {
			if out[c.slot] == allowed {
				out[c.slot] = notEvaluated
				ds[c.slot].Policy = c.Name
			}
		}
	}
	return blocked
}

func decisionOutcome(c *compiled, d Decision) outcome {
	if d.Allowed {
		return allowed
	}
	return denied
}

func (e *Engine) storeFailed(ctx context.Context, rs *routeSet, c *compiled, req Request, err error, lat time.Duration) (Decision, outcome) {
	d := Decision{Policy: c.Name, Limit: c.Limit, Window: c.Window, Degraded: true}
	o := failedClosed
	switch {
	case c.OnStoreError == FailOpen:
		d.Allowed, d.Remaining, o = true, c.Limit, allowed
	case c.OnStoreError == FailLocal && c.local != nil:
		// The instance's own limiter decides: a denial is a real 429.
		if ld, lerr := c.local.Allow(ctx, req); lerr == nil {
			d = ld
			d.Policy, d.Degraded = c.Name, true
			o = denied
			if d.Allowed {
				o = allowed
			}
			break
		}
		d.RetryAfter = time.Second
	default:
		d.RetryAfter = time.Second
	}
	e.log.LogAttrs(ctx, slog.LevelWarn, "edgelimit: store failed",
		slog.String("policy", c.Name), slog.String("route", rs.label), slog.String("strategy", c.Strategy),
		slog.String("on_store_error", c.OnStoreError), slog.Float64("latency_ms", float64(lat.Microseconds())/1000), slog.String("error", err.Error()))
	e.emit(rs, c, d, err, lat)
	return d, o
}

func (e *Engine) emit(rs *routeSet, c *compiled, d Decision, err error, lat time.Duration) {
	if e.observe == nil {
		return
	}
	e.observe(Event{Route: rs.label, Policy: c.Name, Strategy: c.Strategy, Allowed: d.Allowed, Shadow: c.Shadow,
		Degraded: d.Degraded, StoreError: err, Latency: lat})
}

// refund gives back what allowed policies spent on a request that another
// policy blocked. Degraded decisions spent nothing.
func (e *Engine) refund(ctx context.Context, cs []member, reqs []Request, ds []Decision, out []outcome) {
	for _, c := range cs {
		if out[c.slot] != allowed || c.refund == nil || ds[c.slot].Degraded {
			continue
		}
		cctx := e.budget(ctx, time.Time{}, c.StoreTimeout)
		if err := c.refund.Refund(cctx, reqs[c.slot], ds[c.slot]); err != nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "edgelimit: refund failed",
				slog.String("policy", c.Name), slog.String("error", err.Error()))
		}
		cctx.stop()
	}
}

// since returns the latency of a store call that started at start. Only
// metrics (Observe) and the store-failure log use it, so without either the
// clock is not read again.
func (e *Engine) since(start time.Time, err error) time.Duration {
	if err == nil && e.observe == nil {
		return 0
	}
	return e.now().Sub(start)
}

// budgetCtx is what context.WithTimeout(parent, d) gives a limiter, without
// the timer until the limiter needs one: the timer starts on the first call
// of Done or Value (so the SDK and anything that waits or derives a context
// get a real one), while Deadline and Err answer from the clock until then.
// A limiter that answers from memory never starts it, which saves three
// allocations and a timer-heap insert and delete per decision.
type budgetCtx struct {
	parent   context.Context
	deadline time.Time

	mu       sync.Mutex
	inner    context.Context // context.WithDeadline(parent, deadline), once started
	cancel   context.CancelFunc
	canceled bool
}

// budget returns a context that expires d from now. start is the engine
// clock's reading just taken, reused as now when that clock is time.Now.
func (e *Engine) budget(parent context.Context, start time.Time, d time.Duration) *budgetCtx {
	if !e.realClock || start.IsZero() {
		start = time.Now()
	}
	deadline := start.Add(d)
	if pd, ok := parent.Deadline(); ok && pd.Before(deadline) {
		deadline = pd
	}
	return &budgetCtx{parent: parent, deadline: deadline}
}

// started returns the real context, creating it on first use.
func (c *budgetCtx) started() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancel = context.WithDeadline(c.parent, c.deadline)
		if c.canceled {
			c.cancel()
		}
	}
	return c.inner
}

// stop releases the context, as the CancelFunc of WithTimeout does.
func (c *budgetCtx) stop() {
	c.mu.Lock()
	c.canceled = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *budgetCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *budgetCtx) Done() <-chan struct{} { return c.started().Done() }

func (c *budgetCtx) Value(key any) any { return c.started().Value(key) }

func (c *budgetCtx) Err() error {
	c.mu.Lock()
	inner, canceled := c.inner, c.canceled
	c.mu.Unlock()
	if inner != nil {
		return inner.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if canceled {
		return context.Canceled
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}
