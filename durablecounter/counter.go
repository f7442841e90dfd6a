package durablecounter

import (
	"fmt"
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
	_ interface {
		Local() (edgelimit.Limiter, error)
	} = (*Counter)(nil)
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
