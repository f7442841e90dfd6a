package durablecounter

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// Config configures a Counter.
type Config struct {
	// Policy is the policy the Counter enforces. Required. New reads its
	// Name, Strategy (nil or durable), Limit, Window and Options once;
	// later changes to it have no effect.
	Policy *policy.Policy
	// Options, if set, are the Counter's algorithm, burst, shards and deny
	// cache; default the Policy's Options (what its file said), else the
	// zero Options.
	Options *Options
	// Store keeps the counts; default a Memory store shared by every Counter
	// in the process built without a Store (so they can be batched).
	Store Store
	// Now is the Counter's clock. Without it the Counter decides at the
	// Request's At (the engine reads the instant once for every policy of
	// a request), or at time.Now() when At is zero.
	Now func() time.Time
	// DenyCacheSize bounds the Counter's deny cache (when the policy's
	// DenyCache is on): entries, plus one per sliding-log bucket they hold;
	// default DefaultDenyCacheSize.
	DenyCacheSize int
	// DenyCacheMaxAge bounds how long what this instance knows may hide
	// another instance's operator action (a reset, a grant, see
	// Counter.Reset and Counter.Grant): a deny-cache entry answers at most
	// this long after the store's answer it holds (and never past the
	// denial's own retry time), and the policy's grant marker is read again
	// after it. A flooding key then costs at most one store call per this
	// interval per instance. Default DefaultDenyCacheMaxAge (1s).
	DenyCacheMaxAge time.Duration
}

// DefaultDenyCacheSize is Config.DenyCacheSize's default: 131,072, so that
// 100,000 denied keys of a fixed window, sliding window or gcra policy fit
// (the cache has 16 shards of 8,192; 100,000 keys put about 6,250 ± 80 in
// each), where the 65,536 of before evicted a third of them. A full cache
// holds about 29 MB of entries (measured: 16 maps of 8,192 entries of 112
// bytes, with their slack) plus the keys it retains (24 bytes each for the
// engine's hashed keys): about 32 MB per Counter at most, reached only when
// that many distinct keys are denied within their retry windows; 100,000
// entries hold 14 MB. A sliding log's entry weighs 1 plus its buckets (at
// most 33), 16 bytes each, which the bound counts.
const DefaultDenyCacheSize = 1 << 17

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

// DefaultDenyCacheMaxAge is Config.DenyCacheMaxAge's default.
const DefaultDenyCacheMaxAge = time.Second

// maxVariants bounds the limits (tiers, overrides) a Counter keeps the
// algorithms of; beyond it, a request's algorithms are built for it alone.
const maxVariants = 1024

// Counter is an exact rate limiter for one policy: however many instances
// and goroutines ask at once, it admits at most what its algorithm allows
// and denies nothing that fits. Every decision is one conditional write to
// its Store in the common case, and none for a repeat denial the deny cache
// can answer. A Counter is safe for concurrent use.
type Counter struct {
	name string
	alg  Algorithm
	// shards is the number of items a key is spread over, whatever the
	// limits in force (a shard's items keep their names).
	shards int
	// base is the policy's own limits; a request with Limits (a tier, an
	// override) is decided by the variant of its limits (variantFor).
	base *variant
	// burstFollows: the policy's burst is its limit (gcra's default), so
	// the burst in force follows the limit in force.
	burstFollows bool
	variants     struct {
		mu sync.RWMutex
		m  map[policy.Limits]*variant
	}
	store Store
	// clock is Config.Now, or nil: then decisions are at Request.At.
	clock func() time.Time
	// deny is the deny cache, or nil; denyAge bounds how long an entry
	// answers (DenyCacheMaxAge, in nanoseconds).
	deny    *stateCache
	denyAge int64
	// peeks is what Peek last read of each item, for PeekFreshness: a flood
	// that another policy denies peeks this one on every request, and
	// without it each peek that finds room would cost a read.
	peeks    *stateCache
	peekUsed atomic.Bool // peeks holds (or held) something
	// refresh lets one request per item refresh an expired deny-cache entry.
	refresh flights
	// pool is the policy's grants (grant.go), nil for a policy that takes
	// none (without Overrides); marker is what this instance knows of the
	// policy's grant marker.
	pool   *grantPool
	marker grantMarker
	// cfg is what New was given, for Local.
	cfg Config
}

// variant is a Counter's algorithms for one set of limits in force.
type variant struct {
	// lim is the whole policy's limit, window and burst (gcra), before the
	// shards' shares.
	lim policy.Limits
	// qLimit and qWindow are what decisions tell the client (Limit and
	// Window): the limit and window, or for gcra with a burst other than
	// the limit, the burst over the time the bucket takes to fill.
	qLimit  int64
	qWindow time.Duration
	// algs has one algorithm per shard, each with its share of the limit.
	algs []algorithm
	// err: these limits cannot be enforced (a cached refusal).
	err error
}

var (
	_ edgelimit.Limiter      = (*Counter)(nil)
	_ edgelimit.BatchLimiter = (*Counter)(nil)
	_ edgelimit.Refunder     = (*Counter)(nil)
	_ edgelimit.Peeker       = (*Counter)(nil)
	_ edgelimit.Charger      = (*Counter)(nil)
	_ edgelimit.Localizer    = (*Counter)(nil)
	_ edgelimit.Quoter       = (*Counter)(nil)
	_ edgelimit.Resetter     = (*Counter)(nil)
	_ edgelimit.Granter      = (*Counter)(nil)
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
	// tag names a window other than the policy's in the items of the
	// algorithms whose state is per window ("" for the policy's own), so
	// that counts of different windows never share an item.
	tag string
}

var defaultStore = sync.OnceValue(func() *Memory { return NewMemory(MemoryConfig{}) })

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
	if p.Name == "" || strings.ContainsAny(p.Name, "#/") {
		return nil, fmt.Errorf("%w: policy name %q must be non-empty and without '#' or '/'", ErrConfig, p.Name)
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
	if cfg.DenyCacheMaxAge < 0 {
		return nil, fmt.Errorf("%w: policy %q: DenyCacheMaxAge %s is negative", ErrConfig, p.Name, cfg.DenyCacheMaxAge)
	}
	alg := opts.Algorithm
	if alg == "" {
		alg = FixedWindow
	}
	if _, ok := algorithms[alg]; !ok {
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
	c := &Counter{name: p.Name, alg: alg, shards: shards, store: cfg.Store, clock: cfg.Now, cfg: cfg,
		burstFollows: burst == p.Limit}
	if p.Overrides {
		c.pool = newGrantPool(p.Name)
	}
	c.denyAge = int64(cfg.DenyCacheMaxAge)
	if c.denyAge == 0 {
		c.denyAge = int64(DefaultDenyCacheMaxAge)
	}
	base := policy.Limits{Limit: p.Limit, Window: p.Window, Burst: burst}
	if c.base, err = c.build(base); err != nil {
		return nil, err
	}
	c.variants.m = map[policy.Limits]*variant{}
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

// build returns the algorithms of the whole policy's limits l (which New
// or effective completed), or the reason they cannot be enforced.
func (c *Counter) build(l policy.Limits) (*variant, error) {
	name := c.name
	switch {
	case l.Limit < 0 || l.Burst < 0:
		return nil, fmt.Errorf("%w: policy %q: limit %d and burst %d must not be negative", ErrLimits, name, l.Limit, l.Burst)
	case l.Window < time.Millisecond || l.Window%time.Millisecond != 0:
		return nil, fmt.Errorf("%w: policy %q: window %s must be a whole number of milliseconds, at least 1ms", ErrLimits, name, l.Window)
	}
	v := &variant{lim: l, qLimit: l.Limit, qWindow: l.Window}
	if c.alg == GCRA && l.Limit > 0 && l.Burst != l.Limit {
		// As the engine's RateLimit-Policy has always announced a bucket:
		// 10/s with burst 20 is q=20, w=2s, so Remaining never exceeds q.
		v.qLimit = l.Burst
		v.qWindow = time.Duration(float64(l.Window) * float64(l.Burst) / float64(l.Limit))
	}
	tag := ""
	if c.base != nil && l.Window != c.base.lim.Window {
		tag = "/" + strconv.FormatInt(l.Window.Milliseconds(), 10)
	}
	newAlg := algorithms[c.alg]
	for i := range c.shards {
		sp := params{name: name, limit: share(l.Limit, c.shards, i), window: l.Window, burst: share(l.Burst, c.shards, i), tag: tag}
		switch c.alg {
		case SlidingLog:
			if sp.limit > MaxSlidingLogLimit {
				return nil, fmt.Errorf("%w: policy %q: sliding-log keeps one attribute per admitted millisecond in one item, so its limit is at most %d per shard; use shards: %d or more, or sliding-window",
					limitsErr(c.base), name, MaxSlidingLogLimit, (l.Limit+MaxSlidingLogLimit-1)/MaxSlidingLogLimit)
			}
		case GCRA:
			if sp.limit > 0 {
				T := (int64(l.Window) + sp.limit - 1) / sp.limit
				if sp.burst > maxTolerance/T {
					return nil, fmt.Errorf("%w: policy %q: burst %d at %d per %s is a tolerance of more than 36 years", limitsErr(c.base), name, l.Burst, l.Limit, l.Window)
				}
			}
		}
		v.algs = append(v.algs, newAlg(sp))
	}
	return v, nil
}

// limitsErr is the sentinel of a refusal by build: ErrConfig for the
// policy's own limits (New), ErrLimits for a request's.
func limitsErr(base *variant) error {
	if base == nil {
		return ErrConfig
	}
	return ErrLimits
}

// effective completes a request's limits with the policy's: a zero field
// keeps the policy's, a block is a limit of 0, and gcra's burst follows the limit in force when the
// policy's burst is its limit (the default). The other algorithms have no
// burst.
func (c *Counter) effective(l policy.Limits) policy.Limits {
	b := c.base.lim
	out := policy.Limits{Limit: l.Limit, Window: l.Window, Burst: l.Burst}
	if out.Limit == 0 {
		out.Limit = b.Limit
	}
	if out.Window == 0 {
		out.Window = b.Window
	}
	if l.Block { // an operator's block: nothing is admitted
		out.Limit = 0
	}
	switch {
	case c.alg != GCRA:
		out.Burst = out.Limit
	case out.Burst != 0:
	case c.burstFollows:
		out.Burst = out.Limit
	default:
		out.Burst = b.Burst
	}
	return out
}

// variantFor returns the algorithms of the limits in force for req: the
// policy's, unless req.Limits (a tier, an override) changes them. A policy
// that no request changes pays one comparison for it.
func (c *Counter) variantFor(req edgelimit.Request) (*variant, error) {
	if req.Limits.IsZero() {
		return c.base, nil
	}
	return c.variantOf(c.effective(req.Limits))
}

func (c *Counter) variantOf(l policy.Limits) (*variant, error) {
	if l == c.base.lim {
		return c.base, nil
	}
	c.variants.mu.RLock()
	v, ok := c.variants.m[l]
	c.variants.mu.RUnlock()
	if !ok {
		var err error
		if v, err = c.build(l); err != nil {
			v = &variant{lim: l, err: err}
		}
		c.variants.mu.Lock()
		if len(c.variants.m) < maxVariants {
			if old, ok := c.variants.m[l]; ok {
				v = old
			} else {
				c.variants.m[l] = v
			}
		}
		c.variants.mu.Unlock()
	}
	return v, v.err
}

// Local returns the Counter's in-process twin: the same policy and clock on
// a Memory store of its own. The engine uses it for a policy with
// on_store_error: local while the store fails, so that each instance still
// holds the limit (at most the limit per instance, instead of everything).
func (c *Counter) Local() (edgelimit.Limiter, error) {
	cfg := c.cfg
	cfg.Store = NewMemory(MemoryConfig{})
	return New(cfg)
}

// shardID is the itemID shard of shard i.
func (c *Counter) shardID(i int) int32 {
	if c.shards == 1 {
		return noShard
	}
	return int32(i)
}

func (c *Counter) op(v *variant, shard int, key string, cost, t int64) op {
	alg := v.algs[shard]
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
// and the quota in force (RateLimit-Policy's q and w), which Remaining
// never exceeds.
func (v *variant) told(name string, d *edgelimit.Decision) {
	d.Policy, d.Limit, d.Window = name, v.qLimit, v.qWindow
	d.Remaining = min(d.Remaining, max(v.qLimit, 0))
}

// Quota returns what the Counter's decisions tell the client in
// RateLimit-Policy for the policy's own limits: the limit and window, or
// for gcra with a burst other than the limit, the burst over the time the
// bucket takes to fill. A tier or an override announces its own.
func (c *Counter) Quota() (limit int64, window time.Duration) { return c.base.qLimit, c.base.qWindow }

// receiptOf returns the receipt of an admission r on shard.
func receiptOf(r *result, shard int) edgelimit.Receipt {
	rc := r.rc
	rc.Slot |= int64(shard)
	return rc
}
