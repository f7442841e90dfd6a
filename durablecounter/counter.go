package durablecounter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelimit/edgelimit"
)

// Config configures a Counter.
type Config struct {
	// Policy is the policy the Counter enforces. Required. New reads its
	// Name, Strategy (nil or durable), Limit, Window and Options once;
	// later changes to it have no effect.
	Policy *edgelimit.Policy
	// Options, if set, are the Counter's algorithm, burst, shards and deny
	// cache; default the Policy's Options (what its file said), else the
	// zero Options.
	Options *Options
	// Store keeps the counts; default a MemoryStore shared by every Counter
	// in the process built without a Store (so they can be batched).
	Store Store
	// Now is the Counter's clock. Without it the Counter decides at the
	// Request's At (the engine reads the instant once for every policy of
	// a request), or at time.Now() when At is zero.
	Now func() time.Time
	// DenyCacheSize bounds the Counter's deny cache (when the policy's
	// DenyCache is on): entries, plus one per sliding-log bucket they hold;
	// default 65,536.
	DenyCacheSize int
}

// DefaultDenyCacheSize is Config.DenyCacheSize's default.
const DefaultDenyCacheSize = 1 << 16

// PeekFreshness is how long Peek answers "there is room" from what it last
// read of an item instead of reading again (with the deny cache on). Peeks
// only fill the headers of a request another policy denied, so the cost of
// the staleness is a 429 that may show this policy with up to a second's
// spending of other instances missing (and so, rarely, not name it as
// violated); this instance's own spending always shows, and a denial it
// shows is always real.
const PeekFreshness = time.Second

// peekCacheSize bounds what Peek remembers (entries, as DenyCacheSize).
const peekCacheSize = 1 << 14

// MaxShards is the most shards a policy can spread a key over.
const MaxShards = 1000

// Counter is an exact rate limiter for one policy: however many instances
// and goroutines ask at once, it admits at most what its algorithm allows
// and denies nothing that fits. Every decision is one conditional write to
// its Store in the common case, and none for a repeat denial the deny cache
// can answer. A Counter is safe for concurrent use.
type Counter struct {
	name  string
	limit int64
	// qLimit and qWindow are what decisions tell the client (Limit and
	// Window): the limit and window, or for gcra with a burst other than
	// the limit, the burst over the time the bucket takes to fill.
	qLimit  int64
	qWindow time.Duration
	store   Store
	// clock is Config.Now, or nil: then decisions are at Request.At.
	clock func() time.Time
	// algs has one algorithm per shard, each with its share of the limit
	// (one for a policy that is not sharded).
	algs []algorithm
	// deny is the deny cache, or nil.
	deny *stateCache
	// peeks is what Peek last read of each item, for PeekFreshness: a flood
	// that another policy denies peeks this one on every request, and
	// without it each peek that finds room would cost a read.
	peeks    *stateCache
	peekUsed atomic.Bool // peeks holds (or held) something
	// refresh lets one request per item refresh an expired deny-cache entry.
	refresh flights
	// cfg is what New was given, for Local.
	cfg Config
}

var (
	_ edgelimit.Limiter      = (*Counter)(nil)
	_ edgelimit.BatchLimiter = (*Counter)(nil)
	_ edgelimit.Refunder     = (*Counter)(nil)
	_ edgelimit.Peeker       = (*Counter)(nil)
	_ edgelimit.Localizer    = (*Counter)(nil)
)

// algorithms maps a policy's algorithm to its constructor.
var algorithms = map[Algorithm]func(p params) algorithm{
	FixedWindow:   newFixedWindow,
	SlidingWindow: newSlidingWindow,
	SlidingLog:    newSlidingLog,
	GCRA:          newGCRA,
}

// params are the policy fields an algorithm uses, for one shard.
type params struct {
	name   string
	limit  int64
	window time.Duration
	burst  int64
}

var defaultStore = sync.OnceValue(func() *MemoryStore { return NewMemoryStore(MemoryConfig{}) })

// share returns shard i's part of total split over n shards.
func share(total int64, n, i int) int64 {
	s := total / int64(n)
	if int64(i) < total%int64(n) {
		s++
	}
	return s
}

// New validates cfg and returns a Counter.
func New(cfg Config) (*Counter, error) {
	p := cfg.Policy
	if p == nil {
		return nil, fmt.Errorf("%w: Policy is required", ErrConfig)
	}
	if p.Name == "" || strings.ContainsRune(p.Name, '#') {
		return nil, fmt.Errorf("%w: policy name %q must be non-empty and without '#'", ErrConfig, p.Name)
	}
	if p.Strategy != nil && p.Strategy != Strategy {
		return nil, fmt.Errorf("%w: policy %q: strategy %q is not %s", ErrConfig, p.Name, p.Strategy.Name, Strategy.Name)
	}
	opts, err := options(cfg)
	if err != nil {
		return nil, err
	}
	if p.Limit < 0 {
		return nil, fmt.Errorf("%w: policy %q: limit %d is negative", ErrConfig, p.Name, p.Limit)
	}
	if p.Window < time.Millisecond || p.Window%time.Millisecond != 0 {
		return nil, fmt.Errorf("%w: policy %q: window %s must be a whole number of milliseconds, at least 1ms", ErrConfig, p.Name, p.Window)
	}
	alg := opts.Algorithm
	if alg == "" {
		alg = FixedWindow
	}
	newAlg, ok := algorithms[alg]
	if !ok {
		return nil, fmt.Errorf("%w: policy %q: unknown algorithm %q", ErrUnsupportedAlgorithm, p.Name, alg)
	}
	shards := max(opts.Shards, 1)
	if p.Limit == 0 {
		shards = 1 // everything is denied without a store call anyway
	}
	switch {
	case shards > MaxShards:
		return nil, fmt.Errorf("%w: policy %q: shards %d is more than %d", ErrConfig, p.Name, shards, MaxShards)
	case int64(shards) > p.Limit && p.Limit > 0:
		return nil, fmt.Errorf("%w: policy %q: shards %d is more than the limit %d; each shard needs at least one unit", ErrConfig, p.Name, shards, p.Limit)
	}
	burst := p.Limit
	if alg == GCRA && opts.Burst != 0 {
		burst = opts.Burst
	}
	if burst < 0 || alg == GCRA && p.Limit > 0 && burst < int64(shards) {
		return nil, fmt.Errorf("%w: policy %q: burst %d must be at least 1 per shard (%d)", ErrConfig, p.Name, burst, shards)
	}
	c := &Counter{name: p.Name, limit: p.Limit, qLimit: p.Limit, qWindow: p.Window, store: cfg.Store, clock: cfg.Now, cfg: cfg}
	if alg == GCRA && p.Limit > 0 && burst != p.Limit {
		// As the engine's RateLimit-Policy has always announced a bucket:
		// 10/s with burst 20 is q=20, w=2s, so Remaining never exceeds q.
		c.qLimit = burst
		c.qWindow = time.Duration(float64(p.Window) * float64(burst) / float64(p.Limit))
	}
	for i := range shards {
		sp := params{name: p.Name, limit: share(p.Limit, shards, i), window: p.Window, burst: share(burst, shards, i)}
		switch alg {
		case SlidingLog:
			if sp.limit > MaxSlidingLogLimit {
				return nil, fmt.Errorf("%w: policy %q: sliding-log keeps one attribute per admitted millisecond in one item, so its limit is at most %d per shard; use shards: %d or more, or sliding-window",
					ErrConfig, p.Name, MaxSlidingLogLimit, (p.Limit+MaxSlidingLogLimit-1)/MaxSlidingLogLimit)
			}
		case GCRA:
			if sp.limit > 0 {
				T := (int64(p.Window) + sp.limit - 1) / sp.limit
				if sp.burst > maxTolerance/T {
					return nil, fmt.Errorf("%w: policy %q: burst %d at %d per %s is a tolerance of more than 36 years", ErrConfig, p.Name, burst, p.Limit, p.Window)
				}
			}
		}
		c.algs = append(c.algs, newAlg(sp))
	}
	if c.store == nil {
		c.store = defaultStore()
	}
	if opts.DenyCache {
		size := cfg.DenyCacheSize
		if size <= 0 {
			size = DefaultDenyCacheSize
		}
		c.deny = newStateCache(size)
		c.peeks = newStateCache(peekCacheSize)
	}
	return c, nil
}

// Local returns the Counter's in-process twin: the same policy and clock on
// a MemoryStore of its own. The engine uses it for a policy with
// on_store_error: local while the store fails, so that each instance still
// holds the limit (at most the limit per instance, instead of everything).
func (c *Counter) Local() (edgelimit.Limiter, error) {
	cfg := c.cfg
	cfg.Store = NewMemoryStore(MemoryConfig{})
	return New(cfg)
}

// shardID is the itemID shard of shard i.
func (c *Counter) shardID(i int) int32 {
	if len(c.algs) == 1 {
		return noShard
	}
	return int32(i)
}

func (c *Counter) op(shard int, key string, cost, t int64) op {
	alg := c.algs[shard]
	return op{alg: alg, id: alg.itemFor(key, c.shardID(shard), t), cost: cost, t: t}
}

// instant returns when req is decided (Unix nanoseconds): by the Counter's
// clock if it has one, else at req.At, the instant the engine read once
// for every policy of the request, else now.
func (c *Counter) instant(req edgelimit.Request) int64 {
	switch {
	case c.clock != nil:
		return c.clock().UnixNano()
	case !req.At.IsZero():
		return req.At.UnixNano()
	}
	return time.Now().UnixNano()
}

// later returns the instant of a decision at t that waited for another
// request's store call: t moved on by the time that passed, unless req.At
// fixed it.
func (c *Counter) later(req edgelimit.Request, t int64) int64 {
	switch {
	case c.clock != nil:
		return max(t, c.clock().UnixNano())
	case !req.At.IsZero():
		return t
	}
	return max(t, time.Now().UnixNano())
}

// told fills in what every decision tells the client: the policy's name
// and its quota (RateLimit-Policy's q and w).
func (c *Counter) told(d *edgelimit.Decision) {
	d.Policy, d.Limit, d.Window = c.name, c.qLimit, c.qWindow
}

// Quota returns what the Counter's decisions tell the client in
// RateLimit-Policy: the limit and window, or for gcra with a burst other
// than the limit, the burst over the time the bucket takes to fill.
func (c *Counter) Quota() (limit int64, window time.Duration) { return c.qLimit, c.qWindow }

// receiptOf returns the receipt of an admission r on shard.
func receiptOf(r *result, shard int) edgelimit.Receipt {
	rc := r.rc
	rc.Slot |= int64(shard)
	return rc
}

// cached answers o from the deny cache when it proves a denial. held
// reports an entry that does not prove it (the request may fit), expired
// one whose time has passed.
func (c *Counter) cached(o *op) (d edgelimit.Decision, denied, held, expired bool) {
	if c.deny == nil {
		return edgelimit.Decision{}, false, false, false
	}
	st, ok, expired := c.deny.lookup(o.id, o.t)
	if !ok {
		return edgelimit.Decision{}, false, false, expired
	}
	if o.alg.fits(st, o.t, o.cost) {
		return edgelimit.Decision{}, false, true, false
	}
	return o.alg.decision(st, o.t, o.cost, false), true, true, false
}

// remember puts a state the store returned into the deny cache, a lower
// bound of the stored state from then on: until a request of one unit
// would fit it (a denial, or an admission that left nothing), else until
// the denied request would fit, or (a batch member that fit, companion of
// a denial) until the batch's denial expires.
func (c *Counter) remember(o *op, r *result, until int64) {
	if c.deny == nil || !r.known {
		return
	}
	st := o.alg.compact(r.st, o.t)
	switch {
	case !o.alg.fits(st, o.t, 1):
		until = o.t + int64(o.alg.decision(st, o.t, 1, false).RetryAfter)
	case !r.ok:
		until = o.t + int64(r.d.RetryAfter)
	}
	c.deny.put(o.id, st, o.t, until)
}

// Allow decides req: it spends req.Units() of the key's quota if they fit
// and reports the quota left. A denial spends nothing. An error means the
// store failed; the engine then applies the policy's on_store_error. An
// allowed decision carries the Receipt that Refund needs to undo it.
func (c *Counter) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if req.Key == "" {
		return edgelimit.Decision{}, ErrNoKey
	}
	t, cost := c.instant(req), req.Units()
	var d edgelimit.Decision
	switch {
	case c.limit == 0: // denied without asking the store
		d = c.algs[0].decision(state{}, t, cost, false)
	case len(c.algs) == 1:
		var err error
		if d, err = c.decide(ctx, req, 0, cost, t); err != nil {
			return edgelimit.Decision{}, err
		}
	default:
		var err error
		if d, err = c.decideSharded(ctx, req, cost, t); err != nil {
			return edgelimit.Decision{}, err
		}
	}
	c.told(&d)
	return d, nil
}

func (c *Counter) decide(ctx context.Context, req edgelimit.Request, shard int, cost, t int64) (edgelimit.Decision, error) {
	o := c.op(shard, req.Key, cost, t)
	d, denied, held, expired := c.cached(&o)
	if denied {
		return d, nil
	}
	if expired {
		// The key was denied until just now: one request asks the store,
		// the others wait for its answer and look again, so a flood costs
		// one store call per expiry, not one per request in flight.
		wait, leader := c.refresh.join(o.id)
		if !leader {
			select {
			case <-wait:
			case <-ctx.Done():
				return edgelimit.Decision{}, fmt.Errorf("durablecounter: waiting for %q: %w", o.id.pk(), ctx.Err())
			}
			o = c.op(shard, req.Key, cost, c.later(req, t))
			if d, denied, held, _ = c.cached(&o); denied {
				return d, nil
			}
		} else {
			defer c.refresh.done(o.id, wait)
			// A leader that finished between our lookup and our join
			// may have refreshed the entry already.
			if d, denied, held, _ = c.cached(&o); denied {
				return d, nil
			}
		}
	}
	r, err := c.store.apply(ctx, o)
	if err != nil {
		return edgelimit.Decision{}, err
	}
	if r.ok {
		c.unpeek(o.id)
	}
	switch {
	case !r.ok, r.d.Remaining == 0:
		// A denial, or an admission that left nothing: the next request
		// of this instance is answered from the cache.
		c.remember(&o, &r, 0)
	case held, expired:
		// The entry is out of date now that this instance spent units.
		c.deny.del(o.id)
	}
	d = r.d
	if r.ok {
		d.Receipt = receiptOf(&r, shard)
	}
	return d, nil
}

// decideSharded tries the shards from a random one on until one admits the
// request: a request is denied only when every shard denies it (the deny
// cache answers for shards known to be full), so a sharded policy admits
// exactly its limit, at the price of up to one call per shard for a denial
// the cache does not know yet.
func (c *Counter) decideSharded(ctx context.Context, req edgelimit.Request, cost, t int64) (edgelimit.Decision, error) {
	n := len(c.algs)
	start := rand.IntN(n)
	var worst edgelimit.Decision
	for k := range n {
		shard := (start + k) % n
		d, err := c.decide(ctx, req, shard, cost, t)
		if err != nil {
			return edgelimit.Decision{}, err
		}
		if d.Allowed {
			if d.Remaining == 0 {
				c.wholePolicy(ctx, req.Key, shard, t, &d)
			}
			return d, nil
		}
		if k == 0 {
			worst = d
			continue
		}
		// Denied by every shard: the most any shard has left (what one
		// request could still spend, less than its cost), the soonest any
		// could take the request, the soonest a unit comes back anywhere.
		worst.Remaining = max(worst.Remaining, d.Remaining)
		worst.RetryAfter = min(worst.RetryAfter, d.RetryAfter)
		worst.Reset = min(worst.Reset, d.Reset)
	}
	return worst, nil
}

// wholePolicy makes an admission that left its shard with nothing report
// what the other shards have left, so that a sharded policy's Remaining
// reads 0 only when the whole policy has nothing left: otherwise it is the
// answering shard's, a lower bound of the policy's. It costs one read of
// the other shards (one BatchGetItem), only for such an admission; should
// the read fail, the shard's 0 stands. Reset becomes the soonest instant a
// unit comes back in any shard.
func (c *Counter) wholePolicy(ctx context.Context, key string, shard int, t int64, d *edgelimit.Decision) {
	ops := make([]op, 0, len(c.algs)-1)
	for i := range c.algs {
		if i != shard {
			ops = append(ops, c.op(i, key, 1, t))
		}
	}
	sts := make([]state, len(ops))
	if err := c.store.read(ctx, ops, sts); err != nil {
		return
	}
	for k := range ops {
		o := &ops[k]
		od := o.alg.decision(sts[k], t, 1, true)
		d.Remaining += od.Remaining
		d.Reset = min(d.Reset, od.Reset)
		c.remember(o, &result{ok: true, known: true, st: sts[k]}, 0)
	}
}

// Refund undoes what the allowed decision d spent for req, by d's Receipt:
// on the same item (the window of d's instant, its shard) and the same
// units (the sliding log's millisecond, gcra's slot of the emission
// schedule), as of the later of d's instant and req's (the Counter's clock,
// or req.At): never a later window's count, never below zero. A refund
// after the spent units stopped mattering (the window ended, they left the
// log, they came back to the bucket) gives nothing back. A decision without
// a Receipt (a denial, a peek, a member of a batch that was not committed,
// a degraded decision) spent nothing, and Refund returns nil. A refund that
// cannot land is retried until ctx ends, then returned as an error.
func (c *Counter) Refund(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	if req.Key == "" {
		return ErrNoKey
	}
	rc := d.Receipt
	if !d.Allowed || rc.At == 0 || c.limit == 0 {
		return nil
	}
	shard := int(rc.Slot & shardMask)
	if shard >= len(c.algs) {
		return fmt.Errorf("%w: shard %d of policy %q, which has %d", ErrReceipt, shard, c.name, len(c.algs))
	}
	o := op{alg: c.algs[shard], cost: req.Units(), t: max(c.instant(req), rc.At)}
	o.id = o.alg.itemFor(req.Key, c.shardID(shard), rc.At)
	if c.deny != nil {
		c.deny.del(o.id)
	}
	c.unpeek(o.id)
	_, err := c.store.refund(ctx, o, rc)
	return err
}

// Peek reports whether req would be allowed now, and the policy's state,
// without spending anything; the decision has no Receipt. A denial it
// reports is real. It answers from the deny cache only where the cached
// state (a lower bound of the stored one) proves the denial; otherwise it
// reads the item (one consistent GetItem; a sharded policy reads its
// shards with one BatchGetItem) and remembers what the read showed in the
// deny cache, so that repeat peeks, and requests, of a key the read showed
// denied cost no call until it could fit. A peek that finds room costs one
// read every time: the cache cannot prove that anything fits.
func (c *Counter) Peek(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if req.Key == "" {
		return edgelimit.Decision{}, ErrNoKey
	}
	t, cost := c.instant(req), req.Units()
	if c.limit == 0 {
		d := c.algs[0].decision(state{}, t, cost, false)
		c.told(&d)
		return d, nil
	}
	if len(c.algs) == 1 {
		o := c.op(0, req.Key, cost, t)
		d, denied, _, _ := c.cached(&o)
		if !denied {
			st, fresh := c.peekView(&o)
			if !fresh {
				var err error
				if st, err = c.store.get(ctx, o); err != nil {
					return edgelimit.Decision{}, err
				}
				c.peeked(&o, st)
			}
			fits := o.alg.fits(st, t, cost)
			d = o.alg.decision(st, t, cost, fits)
			if !fresh {
				c.remember(&o, &result{ok: fits, known: true, st: st, d: d}, 0)
			}
		}
		c.told(&d)
		return d, nil
	}
	n := len(c.algs)
	ops, ds := make([]op, n), make([]edgelimit.Decision, n)
	proven := 0
	for i := range n {
		ops[i] = c.op(i, req.Key, cost, t)
		if d, denied, _, _ := c.cached(&ops[i]); denied {
			ds[i] = d
			proven++
		}
	}
	if proven < n { // something may fit: read every shard
		sts := make([]state, n)
		if err := c.store.read(ctx, ops, sts); err != nil {
			return edgelimit.Decision{}, err
		}
		for i := range ops {
			o := &ops[i]
			fits := o.alg.fits(sts[i], t, cost)
			ds[i] = o.alg.decision(sts[i], t, cost, fits)
			c.remember(o, &result{ok: fits, known: true, st: sts[i], d: ds[i]}, 0)
			if fits {
				// What the shard has left, for the policy's sum.
				ds[i] = o.alg.decision(sts[i], t, cost, true)
			}
		}
	}
	d := combine(ds)
	c.told(&d)
	return d, nil
}

// peekView returns what Peek read of o's item less than PeekFreshness ago.
func (c *Counter) peekView(o *op) (state, bool) {
	if c.peeks == nil {
		return state{}, false
	}
	return c.peeks.get(o.id, o.t)
}

// peeked remembers what Peek read of o's item, for PeekFreshness.
func (c *Counter) peeked(o *op, st state) {
	if c.peeks != nil {
		c.peekUsed.Store(true)
		c.peeks.put(o.id, o.alg.compact(st, o.t), o.t, o.t+int64(PeekFreshness))
	}
}

// unpeek forgets what Peek read of an item this instance just spent on or
// refunded, so that its own spending always shows; until a peek has been
// remembered, it costs one atomic load.
func (c *Counter) unpeek(id itemID) {
	if c.peekUsed.Load() {
		c.peeks.del(id)
	}
}

// combine reports the decisions of a sharded policy's shards as the
// policy's: allowed if any shard allows, with the units every shard has
// left and the soonest a unit comes back anywhere; else denied with what
// the best shard has left (less than the cost: a request must fit one
// shard), the soonest any shard could take the request, and the soonest a
// unit comes back anywhere.
func combine(ds []edgelimit.Decision) edgelimit.Decision {
	if len(ds) == 1 {
		return ds[0]
	}
	var out edgelimit.Decision
	for i, d := range ds {
		out.Allowed = out.Allowed || d.Allowed
		if i == 0 || d.Reset < out.Reset {
			out.Reset = d.Reset
		}
	}
	first := true
	for _, d := range ds {
		switch {
		case out.Allowed:
			out.Remaining += d.Remaining
		case first:
			out.Remaining, out.RetryAfter, first = d.Remaining, d.RetryAfter, false
		default:
			out.Remaining = max(out.Remaining, d.Remaining)
			out.RetryAfter = min(out.RetryAfter, d.RetryAfter)
		}
	}
	return out
}

// BatchKey identifies the Counter's Store: Counters with equal keys can be
// decided together by AllowBatch.
func (c *Counter) BatchKey() string { return c.store.batchKey() }

// batchInstant returns when a batch is decided: by c's clock, else at the
// first request's At (the engine gives every policy of a request the same
// one), else now.
func (c *Counter) batchInstant(items []edgelimit.BatchItem) int64 {
	return c.instant(items[0].Request)
}

// AllowBatch decides several requests, each against its own Counter, all or
// nothing: either every decision is allowed and every request spent its
// units, or nothing was spent; then every member whose quota was exceeded
// is denied and the others are reported allowed with their quota without
// this request (and without a Receipt: they spent nothing). Every member
// must be a *Counter on c's Store, each policy at most once. The batch is
// decided at one instant: c's clock, else the first request's At, else now.
//
// On a MemoryStore the batch is decided under the members' shard locks; on
// a DynamoStore with one TransactWriteItems, or, on a server without
// transactions, as documented at TransactionMode. When the members' deny
// caches prove that the batch is denied and know every member's state, the
// batch is answered without a store call.
func (c *Counter) AllowBatch(ctx context.Context, items []edgelimit.BatchItem) ([]edgelimit.Decision, error) {
	if len(items) == 0 {
		return nil, nil
	}
	t := c.batchInstant(items)
	n := len(items)
	members := make([]*Counter, n)
	for i, it := range items {
		m, ok := it.Limiter.(*Counter)
		if !ok || m == nil {
			return nil, fmt.Errorf("%w: member %d is a %T, not a *durablecounter.Counter", ErrBatch, i, it.Limiter)
		}
		if m.store != c.store {
			return nil, fmt.Errorf("%w: policy %q is on another store", ErrBatch, m.name)
		}
		if slices.ContainsFunc(members[:i], func(o *Counter) bool { return o.name == m.name }) {
			return nil, fmt.Errorf("%w: policy %q appears twice", ErrBatch, m.name)
		}
		if it.Request.Key == "" {
			return nil, fmt.Errorf("policy %q: %w", m.name, ErrNoKey)
		}
		members[i] = m
	}
	// cur is each member's shard, tried how many shards it has tried.
	cur, tried := make([]int, n), make([]int, n)
	for i, m := range members {
		if len(m.algs) > 1 {
			cur[i] = rand.IntN(len(m.algs))
		}
	}
	ops := make([]op, n)
	res := make([]result, n)
	for {
		for i, m := range members {
			key, cost := items[i].Request.Key, items[i].Request.Units()
			ops[i] = m.op(cur[i], key, cost, t)
			// A sharded member skips the shards its deny cache knows are full.
			for len(m.algs) > 1 && tried[i] < len(m.algs)-1 {
				if _, full, _, _ := m.cached(&ops[i]); !full {
					break
				}
				cur[i], tried[i] = (cur[i]+1)%len(m.algs), tried[i]+1
				ops[i] = m.op(cur[i], key, cost, t)
			}
		}
		if out, ok := fromCaches(members, ops); ok {
			return out, nil
		}
		committed, err := c.store.applyAll(ctx, ops, res)
		if err != nil {
			return nil, err
		}
		out := make([]edgelimit.Decision, n)
		denied, retry := false, true
		until := t
		for i, m := range members {
			out[i] = res[i].d
			m.told(&out[i])
			if !res[i].ok {
				denied = true
				until = max(until, t+int64(res[i].d.RetryAfter))
				// A sharded member may fit in a shard it has not tried.
				retry = retry && len(m.algs) > 1 && tried[i] < len(m.algs)-1
			}
		}
		if committed {
			for i, m := range members {
				m.unpeek(ops[i].id)
				out[i].Receipt = receiptOf(&res[i], cur[i])
				switch {
				case m.deny == nil:
				case res[i].d.Remaining == 0:
					m.remember(&ops[i], &res[i], 0)
				default:
					m.deny.del(ops[i].id)
				}
				if len(m.algs) > 1 && out[i].Remaining == 0 {
					m.wholePolicy(ctx, items[i].Request.Key, cur[i], t, &out[i])
				}
			}
			return out, nil
		}
		if !denied {
			return nil, fmt.Errorf("durablecounter: batch of %d was not committed, yet no member was denied", n)
		}
		for i, m := range members {
			m.remember(&ops[i], &res[i], until)
		}
		if !retry {
			return out, nil
		}
		for i, m := range members {
			if !res[i].ok {
				cur[i], tried[i] = (cur[i]+1)%len(m.algs), tried[i]+1
			}
		}
	}
}

// fromCaches answers a batch from its members' deny caches when one of
// them proves a denial and every member's state is cached: no store call.
func fromCaches(members []*Counter, ops []op) ([]edgelimit.Decision, bool) {
	denied := false
	sts := make([]state, len(ops))
	for i, m := range members {
		o := &ops[i]
		if m.limit == 0 {
			denied = true
			continue
		}
		if m.deny == nil {
			return nil, false
		}
		st, ok := m.deny.get(o.id, o.t)
		if !ok {
			return nil, false
		}
		sts[i] = st
		if !o.alg.fits(st, o.t, o.cost) {
			denied = true
		}
	}
	if !denied {
		return nil, false
	}
	out := make([]edgelimit.Decision, len(ops))
	for i, m := range members {
		o := &ops[i]
		out[i] = o.alg.decision(sts[i], o.t, o.cost, m.limit > 0 && o.alg.fits(sts[i], o.t, o.cost))
		m.told(&out[i])
	}
	return out, true
}
