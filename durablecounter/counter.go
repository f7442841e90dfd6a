package durablecounter

import (
	"fmt"
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
	// cfg is what New was given, and linked the Code it was built with,
	// for Local; newAlg builds alg for one shard of a set of limits.
	cfg    Config
	linked linked
	newAlg func(params) algorithm
	// maxDelay is the policy's max_delay (gcra), in nanoseconds.
	maxDelay int64
}

var (
	_ edgelimit.Limiter      = (*Counter)(nil)
	_ edgelimit.BatchLimiter = (*Counter)(nil)
	_ edgelimit.Refunder     = (*Counter)(nil)
	_ edgelimit.Peeker       = (*Counter)(nil)
	_ edgelimit.Charger      = (*Counter)(nil)
	_ edgelimit.Settler      = (*Counter)(nil)
	_ edgelimit.Localizer    = (*Counter)(nil)
	_ edgelimit.Quoter       = (*Counter)(nil)
	_ edgelimit.Resetter     = (*Counter)(nil)
	_ edgelimit.Granter      = (*Counter)(nil)
)

// defaultStore is the Store of a Config without one: one Memory store
// shared by every such Counter in the process (so they can be batched).
// Built on first use, not at init, so that a program without MemoryCode
// (NewLinked) does not link the Memory store.
func defaultStore() Store {
	sharedMemory.once.Do(func() { sharedMemory.s = NewMemory(MemoryConfig{}) })
	return sharedMemory.s
}

var sharedMemory struct {
	once sync.Once
	s    *Memory
}

// New validates cfg and returns a Counter. It links every algorithm and
// the Memory store; NewLinked links only those a program names.
func New(cfg Config) (*Counter, error) { return newCounter(cfg, all()) }

func newCounter(cfg Config, l linked) (*Counter, error) {
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
	if p.Period.IsZero() && (p.Window < time.Millisecond || p.Window%time.Millisecond != 0) {
		return nil, fmt.Errorf("%w: policy %q: window %s must be a whole number of milliseconds, at least 1ms", ErrConfig, p.Name, p.Window)
	}
	if cfg.DenyCacheMaxAge < 0 {
		return nil, fmt.Errorf("%w: policy %q: DenyCacheMaxAge %s is negative", ErrConfig, p.Name, cfg.DenyCacheMaxAge)
	}
	alg := opts.Algorithm
	if alg == "" {
		alg = FixedWindow
	}
	code, ok := l.code(alg)
	if !ok {
		return nil, notLinked(p.Name, alg)
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
	if cfg.Store == nil && l.memory == nil {
		return nil, fmt.Errorf("%w: policy %q: Store is required (this program did not link the Memory store: durablecounter.NewLinked without MemoryCode)", ErrConfig, p.Name)
	}
	c := &Counter{name: p.Name, alg: alg, newAlg: code.build, linked: l, shards: shards, store: cfg.Store, clock: cfg.Now, cfg: cfg,
		burstFollows: burst == p.Limit}
	if err := c.delayOf(p); err != nil {
		return nil, err
	}
	if p.Overrides {
		c.pool = newGrantPool(p.Name)
	}
	c.denyAge = int64(cfg.DenyCacheMaxAge)
	if c.denyAge == 0 {
		c.denyAge = int64(DefaultDenyCacheMaxAge)
	}
	base := withPeriod(policy.Limits{Limit: p.Limit, Window: p.Window, Burst: burst}, p.Period)
	if c.base, err = c.build(base); err != nil {
		return nil, err
	}
	c.variants.m = map[policy.Limits]*variant{}
	if c.store == nil {
		c.store = l.shared()
	}
	// On a Memory store the deny cache would be a second map in front of
	// the first: the store answers a repeat denial as fast, and exactly
	// (a reset or grant on another Counter of the store shows at once).
	if _, inProcess := c.store.(*Memory); opts.DenyCache && !inProcess {
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
// a Memory store of its own, sharing the Counter's deny cache. The engine
// uses it for a policy with on_store_error: local while the store fails,
// and tells it every decision the store made (Follow), so that it decides
// each key from what this instance last knew of it: what the store's last
// answer had left, or a denial the deny cache holds. Its denials enter the
// deny cache too, so that while the store is slow a denied key costs no
// call that would miss its budget (such an entry answers for at most
// DenyCacheMaxAge, as every entry does).
func (c *Counter) Local() (edgelimit.Limiter, error) {
	if c.linked.memory == nil {
		return nil, fmt.Errorf("%w: policy %q: on_store_error: local keeps the in-process twin in a Memory store, which this program did not link (durablecounter.NewLinked without MemoryCode)", ErrConfig, c.name)
	}
	cfg := c.cfg
	cfg.Store = c.linked.memory()
	tw, err := newCounter(cfg, c.linked)
	if err != nil {
		return nil, err
	}
	if c.deny != nil {
		tw.deny, tw.denyAge = c.deny, c.denyAge
	}
	return tw, nil
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
	return newOp(alg, alg.itemFor(key, c.shardID(shard), t), cost, t)
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

// receiptOf returns the receipt of an admission r on shard.
func receiptOf(r *result, shard int) edgelimit.Receipt {
	rc := r.rc
	rc.Slot |= int64(shard)
	return rc
}
