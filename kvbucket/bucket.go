package kvbucket

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"
	"github.com/edgelimit/edgelimit/policy"
)

// DefaultSyncInterval is how often a hot key is written back (and its share
// of the bucket renewed) when the policy leaves sync_interval unset: about
// the replication lag of an eventually consistent read, so the cache adds
// little staleness to what the KV already has.
const DefaultSyncInterval = time.Second

// DefaultCacheSize is Config.CacheSize's default: room for 100,000 active
// keys (issue #16: at the 10,000 of before, a function with 100,000 active
// clients found most of their keys evicted, and paid a strong read and a
// write per decision), with the headroom the cache's 64 shards need (a
// shard holds 2,048; 100,000 keys put about 1,560 in each, rarely over
// 1,700). The cache grows with the keys it meets, about 500 bytes each
// (measured, TestCacheEntryBytes): 50 MB at 100,000 keys, 66 MB full.
const DefaultCacheSize = 1 << 17

// MaxKeyLength bounds a request key. Keys arrive hashed (22 bytes), so a
// longer one is a caller's bug, refused with ErrBadKey.
const MaxKeyLength = 1024

// Config configures New.
type Config struct {
	// Policy is the kv policy to enforce. Required. Limit per Window is the
	// refill rate and the burst (its Options; default Limit) the bucket
	// size; both at most MaxTokens, Window positive. A Limit of 0 denies
	// every request without touching the KV. Cost is not read: each Request
	// carries its own.
	Policy *policy.Policy
	// Options, if set, are the bucket's burst and sync interval; default
	// the Policy's Options (what its file said), else the zero Options.
	Options *Options
	// KV stores the buckets, shared by every instance. Required: a
	// *dynamostore.Store on AWS, a *Memory for one process.
	KV KV
	// Now is the clock of Allow, Refund and Peek. When set it is the
	// bucket's own and wins over Request.At (tests that inject one keep
	// it); when nil they use Request.At, or time.Now when that is zero.
	Now func() time.Time
	// CacheSize bounds the keys whose state this process keeps (when set,
	// it wins over the policy's cache_size, Options.CacheSize); beyond it
	// a least recently used key is dropped (sampled LRU). The cache grows
	// with the keys it meets, about 500 bytes each (measured: 50 MB for
	// 100,000 keys), up to the bound. Default DefaultCacheSize (131,072:
	// 100,000 active keys with headroom); a function with little memory
	// and many clients may set less, at a strong read and a write for each
	// decision of a key that was dropped. Dropping never loses spending: a
	// key with spending the KV does not know yet is written back first
	// (see the package documentation).
	CacheSize int
	// NoCache makes every admission a conditional write of its own to the
	// KV (a reservation that lands only if it fits) instead of deciding a
	// hot key locally between syncs; default false. Denials the local state
	// proves are still answered without a call.
	NoCache bool
}

// policyParams are the parts of a policy the bucket uses.
type policyParams struct {
	name      string
	params    Params
	sync      time.Duration
	burst     int64
	cacheSize int
	cost      int64
	closed    bool
	maxDelay  time.Duration
}

// paramsOf reads every Policy field and option the bucket uses, and only
// here.
func paramsOf(cfg Config) (policyParams, error) {
	p := cfg.Policy
	if p.Strategy != nil && p.Strategy != Strategy {
		return policyParams{}, fmt.Errorf("%w: policy %q has strategy %q, not kv", ErrConfig, p.Name, p.Strategy.Name)
	}
	opts, err := options(cfg)
	if err != nil {
		return policyParams{}, err
	}
	if p.MaxDelay < 0 {
		return policyParams{}, fmt.Errorf("%w: policy %q: max_delay %s is negative", ErrConfig, p.Name, p.MaxDelay)
	}
	capacity := p.Limit
	if opts.Burst > 0 {
		capacity = opts.Burst
	}
	return policyParams{
		name:      p.Name,
		params:    Params{Capacity: capacity, Limit: p.Limit, Window: p.Window},
		sync:      opts.SyncInterval,
		burst:     opts.Burst,
		cacheSize: opts.CacheSize,
		cost:      p.Cost,
		closed:    p.Limit == 0,
		maxDelay:  p.MaxDelay,
	}, nil
}

// Bucket is a token bucket per key over a KV, with an in-process cache in
// front: the kv strategy's Limiter. It is safe for concurrent use; build one
// per policy per process and share it.
//
// An allowed Decision's Receipt records what it spent, for Refund: At is
// the instant (Unix nanoseconds), Slot the tokens, ID this Bucket and the
// key.
type Bucket struct {
	prefix   string
	p        Params
	u        units
	kv       KV
	now      func() time.Time
	ownClock bool  // Config.Now was set: it wins over Request.At
	sync     int64 // SyncInterval in nanoseconds
	noCache  bool
	closed   bool   // Limit 0: deny everything
	id       uint64 // random: names this Bucket in its receipts
	writer   uint32 // this Bucket's writer id in the KV's writer sets
	cache    *cache
	// burst is the policy's own burst (0: its limit), which a request's
	// limits keep unless they set one.
	burst int64
	// scaled caches the units of requests' limits other than the policy's
	// (tiers, overrides), by their Params; at most maxScaled of them.
	scaled  sync.Map
	nScaled atomic.Int32
	// maxFill is the longest time any limits this Bucket decided under
	// take to fill (nanoseconds): a TAT that deep is a debt, not a clock
	// far ahead (see insane).
	maxFill atomic.Int64
	// cfg is what New was given, for Local.
	cfg Config
	// writingIdle: the idle write-back runs (idle.go).
	writingIdle atomic.Bool
}

// maxScaled bounds the limits whose units a Bucket keeps: the tiers of a
// policy and the overrides in force; beyond it they are computed per
// request (a few multiplications).
const maxScaled = 1024

var (
	_ edgelimit.Limiter   = (*Bucket)(nil)
	_ edgelimit.Refunder  = (*Bucket)(nil)
	_ edgelimit.Peeker    = (*Bucket)(nil)
	_ edgelimit.Charger   = (*Bucket)(nil)
	_ edgelimit.Localizer = (*Bucket)(nil)
	_ edgelimit.Quoter    = (*Bucket)(nil)
	_ edgelimit.Resetter  = (*Bucket)(nil)
	_ edgelimit.Granter   = (*Bucket)(nil)
	_ edgelimit.InProcess = (*Bucket)(nil)
)

// InProcess reports whether the Bucket's state never leaves the process:
// its KV says so (a Memory does; a KV that wraps one may forward the
// method). The engine then hashes the policy's keys with its in-process
// hash (edgelimit.InProcess); on DynamoDB they stay HMAC-SHA256 of the
// configured secret, as operators compute them.
func (b *Bucket) InProcess() bool {
	ip, ok := b.kv.(edgelimit.InProcess)
	return ok && ip.InProcess()
}

// New checks cfg and returns the bucket.
func New(cfg Config) (*Bucket, error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("%w: Config.Policy is required", ErrConfig)
	}
	pp, err := paramsOf(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.KV == nil {
		return nil, fmt.Errorf("%w: policy %q: Config.KV is required", ErrConfig, pp.name)
	}
	if pp.sync < 0 {
		return nil, fmt.Errorf("%w: policy %q: sync interval %s is negative", ErrConfig, pp.name, pp.sync)
	}
	if cfg.CacheSize < 0 {
		return nil, fmt.Errorf("%w: policy %q: cache size %d is negative", ErrConfig, pp.name, cfg.CacheSize)
	}
	b := &Bucket{
		prefix:   pp.name + "#",
		p:        pp.params,
		kv:       cfg.KV,
		now:      cfg.Now,
		ownClock: cfg.Now != nil,
		sync:     int64(pp.sync),
		noCache:  cfg.NoCache,
		closed:   pp.closed,
		id:       rand.Uint64(),
		burst:    pp.burst,
		cfg:      cfg,
	}
	b.writer = uint32(b.id>>32) | 1
	if b.closed {
		b.p.Capacity = 0
		if b.p.Window <= 0 {
			return nil, fmt.Errorf("%w: policy %q: window %s is not positive", ErrConfig, pp.name, b.p.Window)
		}
	} else if err := b.p.Validate(); err != nil {
		return nil, fmt.Errorf("%w (policy %q)", err, pp.name)
	}
	if pp.cost > b.p.Capacity && !b.closed {
		return nil, fmt.Errorf("%w: policy %q: cost %d is more than the capacity %d: every request would be denied",
			ErrConfig, pp.name, pp.cost, b.p.Capacity)
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.sync == 0 {
		b.sync = int64(DefaultSyncInterval)
	}
	size := cfg.CacheSize
	if size == 0 {
		size = pp.cacheSize
	}
	if size == 0 {
		size = DefaultCacheSize
	}
	if !b.closed {
		b.u = newUnits(b.p)
	} else {
		// Nothing is stored at the policy's own limits; a request's limits
		// (a tier, an override) read and write at this scale.
		b.u = newUnits(Params{Capacity: 1, Limit: 1, Window: b.p.Window})
	}
	b.u.dl = wire.Mul(int64(pp.maxDelay), b.u.l) // max_delay's turns, at most 30s×MaxTokens: within 128 bits
	b.cache = newCache(size, &b.u, b.prefix)
	b.maxFill.Store(int64(b.u.fill()))
	return b, nil
}

// Params returns the bucket's numbers.
func (b *Bucket) Params() Params { return b.p }

// SyncInterval returns how often a hot key is written back.
func (b *Bucket) SyncInterval() time.Duration { return time.Duration(b.sync) }

// Local returns the Bucket's in-process twin: the same policy, clock and
// cache settings on a Memory KV of its own. The engine uses it for a policy
// with on_store_error: local while the KV fails, so that each instance still
// holds the limit on its own. Its receipts are its own: a decision of the
// twin is refunded to the twin.
func (b *Bucket) Local() (edgelimit.Limiter, error) {
	cfg := b.cfg
	cfg.KV = NewMemory(MemoryConfig{Now: cfg.Now})
	return New(cfg)
}

// instant is when a decision on req happens: the bucket's own clock if it
// has one, else req.At, else now.
func (b *Bucket) instant(req edgelimit.Request) time.Time {
	if b.ownClock || req.At.IsZero() {
		return b.now()
	}
	return req.At
}

// Allow decides req at its instant: Config.Now's if set, else req.At,
// else time.Now(). See AllowAt.
func (b *Bucket) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	return b.AllowAt(ctx, b.instant(req), req)
}

// AllowAt decides req at the instant now, spending req.Units() tokens when
// the bucket holds them. A denial that the local state proves (it can only
// overstate what the bucket holds) costs no KV call. Otherwise, a key this
// process does not know is read first (strongly consistent); during its
// first sync interval here, and with NoCache, each admission is a
// conditional write to the KV that lands only if it fits; after it, a key
// is decided from this instance's share of the bucket, with no KV call,
// and written back at most once per sync interval, which renews the share
// (see the package documentation). An error means the KV failed or ctx
// ended; the request then spent nothing.
func (b *Bucket) AllowAt(ctx context.Context, now time.Time, req edgelimit.Request) (edgelimit.Decision, error) {
	if err := checkKey(req.Key); err != nil {
		return edgelimit.Decision{}, err
	}
	u, err := b.unitsOf(req.Limits)
	switch {
	case err != nil:
		return edgelimit.Decision{}, err
	case u == nil:
		return b.closedDecision(), nil
	}
	var d edgelimit.Decision
	if err := b.do(ctx, u, now.UnixNano(), req.Key, req.Units(), opAllow, op{}, &d); err != nil {
		return edgelimit.Decision{}, err
	}
	return d, nil
}

// unitsOf returns the units a request with limits l is decided in: the
// policy's own when l changes nothing, else l's in the policy's scale (see
// units.scaled), with l's zero fields the policy's (a zero burst: the
// policy's burst, else the limit in force). nil means a limit of 0 (the
// policy's, or an operator's block): the request is denied without a KV
// call.
func (b *Bucket) unitsOf(l policy.Limits) (*units, error) {
	if l.IsZero() {
		if b.closed {
			return nil, nil
		}
		return &b.u, nil
	}
	p := Params{Limit: b.p.Limit, Window: b.p.Window}
	if l.Limit > 0 {
		p.Limit = l.Limit
	}
	if l.Window > 0 {
		p.Window = l.Window
	}
	if l.Block { // an operator's block: nothing is admitted
		p.Limit = 0
	}
	switch {
	case l.Burst > 0:
		p.Capacity = l.Burst
	case b.burst > 0:
		p.Capacity = b.burst
	default:
		p.Capacity = p.Limit
	}
	switch {
	case p.Limit == 0:
		return nil, nil
	case !b.closed && p == b.p:
		return &b.u, nil
	}
	if v, ok := b.scaled.Load(p); ok {
		return v.(*units), nil
	}
	u, err := b.u.scaled(p)
	if err != nil {
		return nil, fmt.Errorf("%w (policy %q, a request's limits)", err, b.prefix[:len(b.prefix)-1])
	}
	for f := int64(u.fill()); ; {
		old := b.maxFill.Load()
		if old >= f || b.maxFill.CompareAndSwap(old, f) {
			break
		}
	}
	if b.nScaled.Add(1) <= maxScaled {
		b.scaled.Store(p, &u)
	}
	return &u, nil
}

// closedDecision is the denial of a policy with limit 0.
func (b *Bucket) closedDecision() edgelimit.Decision {
	return edgelimit.Decision{Limit: 0, Window: b.p.Window, Reset: b.p.Window, RetryAfter: b.p.Window}
}

// Stats are counters of one Bucket since New.
type Stats struct {
	// Local counts decisions, refunds and peeks made from local state
	// alone.
	Local uint64
	// Synced counts decisions, refunds and peeks that called the KV.
	Synced uint64
	// Reads counts KV reads.
	Reads uint64
	// Writes counts KV updates that were applied.
	Writes uint64
	// Rejected counts conditional KV updates that did not fit (a
	// reservation denied by the KV).
	Rejected uint64
	// Errors counts failed KV calls.
	Errors uint64
	// Evicted counts keys dropped from the cache to respect CacheSize.
	Evicted uint64
	// Flushed counts the write-backs of keys chosen for eviction that held
	// spending (or refunds) the KV did not know yet: eviction writes them
	// back (one update) before it drops them.
	Flushed uint64
	// Keys is the number of keys in the cache now.
	Keys int
}

// Stats returns the bucket's counters.
func (b *Bucket) Stats() Stats {
	var t Stats
	for i := range b.cache.shards {
		s := &b.cache.shards[i]
		s.mu.Lock()
		t.Local += s.stats.Local
		t.Synced += s.stats.Synced
		t.Reads += s.stats.Reads
		t.Writes += s.stats.Writes
		t.Rejected += s.stats.Rejected
		t.Errors += s.stats.Errors
		t.Evicted += s.stats.Evicted
		t.Flushed += s.stats.Flushed
		t.Keys += s.len()
		s.mu.Unlock()
	}
	return t
}

func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyLength {
		return fmt.Errorf("%w: %d bytes (want 1 to %d)", ErrBadKey, len(key), MaxKeyLength)
	}
	return nil
}

// Quota returns what the bucket's decisions tell the client in
// RateLimit-Policy: its burst over the time it takes to fill.
func (b *Bucket) Quota() (limit int64, window time.Duration) { return b.p.Advertised() }
