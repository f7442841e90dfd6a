package kvbucket

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/edgelimit/edgelimit"
)

// DefaultSyncInterval is how often a hot key is written back (and the KV
// read) when the policy leaves sync_interval unset: about the replication
// lag of an eventually consistent read, so the cache adds little staleness
// to what the KV already has.
const DefaultSyncInterval = time.Second

// DefaultCacheSize is Config.CacheSize's default.
const DefaultCacheSize = 10_000

// MaxKeyLength bounds a request key. Keys arrive hashed (22 bytes), so a
// longer one is a caller's bug, refused with ErrBadKey.
const MaxKeyLength = 1024

// Config configures New.
type Config struct {
	// Policy is the kv policy to enforce. Required. Limit per Window is the
	// refill rate and Capacity() (burst, default Limit) the bucket size;
	// both at most MaxTokens, Window positive. A Limit of 0 denies every
	// request without touching the KV. SyncInterval is how often a hot key
	// is written back: 0 means DefaultSyncInterval (1s). Cost is not read:
	// each Request carries its own.
	Policy *edgelimit.Policy
	// KV stores the buckets, shared by every instance. Required: a
	// *DynamoDB on AWS, a *Memory for one process.
	KV KV
	// Now is the clock of Allow and Refund; default time.Now.
	Now func() time.Time
	// CacheSize bounds the keys whose state this process keeps (about 200
	// bytes each); beyond it a least recently used key is dropped (sampled
	// LRU). Default DefaultCacheSize (10,000). A dropped key's unsynced
	// spending is forgotten.
	CacheSize int
	// NoCache makes every decision read and write the KV instead of
	// deciding a hot key locally between syncs; default false. (The bounded
	// local state is kept either way: it is what makes merges conservative.
	// Requests for a key whose sync is already in flight in this process
	// are still decided locally and written with the next one.)
	NoCache bool
}

// Bucket is a token bucket per key over a KV, with an in-process cache in
// front: the kv strategy's Limiter. It is safe for concurrent use; build one
// per policy per process and share it.
type Bucket struct {
	prefix  string
	p       Params
	kv      KV
	now     func() time.Time
	sync    int64 // SyncInterval in nanoseconds
	noCache bool
	closed  bool // Limit 0: deny everything
	cache   *cache
	// cfg is what New was given, for Local.
	cfg Config
}

var (
	_ edgelimit.Limiter   = (*Bucket)(nil)
	_ edgelimit.Refunder  = (*Bucket)(nil)
	_ edgelimit.Localizer = (*Bucket)(nil)
)

// New checks cfg and returns the bucket.
func New(cfg Config) (*Bucket, error) {
	pol := cfg.Policy
	if pol == nil {
		return nil, fmt.Errorf("%w: Config.Policy is required", ErrBadConfig)
	}
	if cfg.KV == nil {
		return nil, fmt.Errorf("%w: policy %q: Config.KV is required", ErrBadConfig, pol.Name)
	}
	if pol.Strategy != "" && pol.Strategy != edgelimit.StrategyKV {
		return nil, fmt.Errorf("%w: policy %q has strategy %q, not kv", ErrBadConfig, pol.Name, pol.Strategy)
	}
	if pol.Algorithm != "" && pol.Algorithm != edgelimit.AlgorithmTokenBucket {
		return nil, fmt.Errorf("%w: policy %q: algorithm %q, kv has only token-bucket", ErrBadConfig, pol.Name, pol.Algorithm)
	}
	if pol.SyncInterval < 0 {
		return nil, fmt.Errorf("%w: policy %q: sync interval %s is negative", ErrBadConfig, pol.Name, pol.SyncInterval)
	}
	if cfg.CacheSize < 0 {
		return nil, fmt.Errorf("%w: policy %q: cache size %d is negative", ErrBadConfig, pol.Name, cfg.CacheSize)
	}
	b := &Bucket{
		prefix:  pol.Name + "#",
		p:       Params{Capacity: pol.Capacity(), Limit: pol.Limit, Window: pol.Window},
		kv:      cfg.KV,
		now:     cfg.Now,
		sync:    int64(pol.SyncInterval),
		noCache: cfg.NoCache,
		closed:  pol.Limit == 0,
		cfg:     cfg,
	}
	if b.closed {
		b.p.Capacity = 0
		if pol.Window <= 0 {
			return nil, fmt.Errorf("%w: policy %q: window %s is not positive", ErrBadConfig, pol.Name, pol.Window)
		}
	} else if err := b.p.Validate(); err != nil {
		return nil, fmt.Errorf("%w (policy %q)", err, pol.Name)
	}
	if pol.Cost > b.p.Capacity && !b.closed {
		return nil, fmt.Errorf("%w: policy %q: cost %d is more than the capacity %d: every request would be denied",
			ErrBadConfig, pol.Name, pol.Cost, b.p.Capacity)
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.sync == 0 {
		b.sync = int64(DefaultSyncInterval)
	}
	size := cfg.CacheSize
	if size == 0 {
		size = DefaultCacheSize
	}
	b.cache = newCache(size)
	return b, nil
}

// Params returns the bucket's numbers.
func (b *Bucket) Params() Params { return b.p }

// SyncInterval returns how often a hot key is written back.
func (b *Bucket) SyncInterval() time.Duration { return time.Duration(b.sync) }

// Local returns the Bucket's in-process twin: the same policy, clock and
// cache settings on a Memory KV of its own. The engine uses it for a policy
// with on_store_error: local while the KV fails, so that each instance still
// holds the limit on its own.
func (b *Bucket) Local() (edgelimit.Limiter, error) {
	cfg := b.cfg
	cfg.KV = NewMemory(MemoryConfig{Now: cfg.Now})
	return New(cfg)
}

// Allow decides req now. See AllowAt.
func (b *Bucket) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	return b.AllowAt(ctx, b.now(), req)
}

// AllowAt decides req at the instant now, spending req.Units() tokens when
// the bucket holds them. A key this process synced less than SyncInterval
// ago is decided from local state, without a KV call; otherwise the KV is
// read (eventually consistent), merged with the local state (the lower
// token count wins), the request decided, and the result written back
// (only when it changed the state). An error means the KV failed or ctx
// ended; the request then spent nothing.
func (b *Bucket) AllowAt(ctx context.Context, now time.Time, req edgelimit.Request) (edgelimit.Decision, error) {
	if err := checkKey(req.Key); err != nil {
		return edgelimit.Decision{}, err
	}
	if b.closed {
		return edgelimit.Decision{Limit: 0, Window: b.p.Window, Reset: b.p.Window, RetryAfter: b.p.Window}, nil
	}
	return b.do(ctx, now.UnixNano(), req.Key, req.Units(), false)
}

// Refund gives back what an earlier Allow of req spent. See RefundAt.
func (b *Bucket) Refund(ctx context.Context, req edgelimit.Request, _ edgelimit.Decision) error {
	return b.RefundAt(ctx, b.now(), req)
}

// RefundAt adds req.Units() tokens back to req.Key's bucket at now, never
// beyond capacity. With the key's state in the cache the refund is local
// and reaches the KV with the next sync (at once with NoCache); otherwise
// it reads and writes the KV.
func (b *Bucket) RefundAt(ctx context.Context, now time.Time, req edgelimit.Request) error {
	if err := checkKey(req.Key); err != nil {
		return err
	}
	if b.closed {
		return nil
	}
	_, err := b.do(ctx, now.UnixNano(), req.Key, req.Units(), true)
	return err
}

// Stats are counters of one Bucket since New.
type Stats struct {
	// Local counts decisions and refunds made from local state alone.
	Local uint64
	// Synced counts decisions and refunds that read the KV.
	Synced uint64
	// Writes counts successful KV writes.
	Writes uint64
	// Errors counts failed KV calls.
	Errors uint64
	// Evicted counts keys dropped from the cache to respect CacheSize.
	Evicted uint64
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
		t.Writes += s.stats.Writes
		t.Errors += s.stats.Errors
		t.Evicted += s.stats.Evicted
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

// do decides (or, with refund, refunds) cost units of key at n.
func (b *Bucket) do(ctx context.Context, n int64, key string, cost int64, refund bool) (edgelimit.Decision, error) {
	s, h := b.cache.shard(key)
	for {
		s.mu.Lock()
		e := s.lookup(key, h, n)
		if e.known && (e.syncing || !b.due(e, n, refund)) {
			d := b.local(e, n, cost, refund)
			s.stats.Local++
			s.mu.Unlock()
			return d, nil
		}
		if e.syncing {
			// The first sync of this key is in flight: its answer is the
			// only state there is.
			w := e.wait
			s.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return edgelimit.Decision{}, fmt.Errorf("kvbucket: wait for the sync of %q: %w", b.prefix+key, ctx.Err())
			}
		}
		e.syncing = true
		e.syncedAt = n
		if !e.known {
			e.wait = make(chan struct{})
		}
		s.stats.Synced++
		s.mu.Unlock()
		return b.syncKey(ctx, s, e, n, cost, refund)
	}
}

// due reports whether e must be synced before deciding at n.
func (b *Bucket) due(e *entry, n int64, refund bool) bool {
	if b.noCache {
		return true
	}
	if refund {
		return false
	}
	since := n - e.syncedAt
	return since >= b.sync || since < -b.sync
}

// local decides from e alone. s.mu is held.
func (b *Bucket) local(e *entry, n int64, cost int64, refund bool) edgelimit.Decision {
	if !e.contended {
		r := b.p.refill(e.local, n)
		if refund {
			e.local = b.p.add(r, cost)
			e.pending -= e.local.Tokens - r.Tokens
			return edgelimit.Decision{}
		}
		st, d, ok := b.p.take(r, n, cost)
		if ok {
			e.local = st
			e.pending += cost * TokenScale
		} else if restamped(e.local, n) {
			e.local = st
		}
		return d
	}
	// Contended: other instances spend this key too, and tokens refilled
	// since the sync may be spent by each of them. Spend only what the sync
	// saw (e.local is stamped then), until the next sync refills it.
	frozen := b.p.refill(e.local, e.local.At)
	if refund {
		e.local = b.p.add(frozen, cost)
		e.pending -= e.local.Tokens - frozen.Tokens
		return edgelimit.Decision{}
	}
	st, d, ok := b.p.take(frozen, frozen.At, cost)
	if ok {
		e.local = st
		e.pending += cost * TokenScale
	}
	// The durations were counted from the sync; shift them to now. A
	// denial lasts at least until the next sync.
	elapsed := time.Duration(max(n-frozen.At, 0))
	d.Reset = max(d.Reset-elapsed, 0)
	if !d.Allowed {
		d.RetryAfter = max(d.RetryAfter-elapsed, time.Duration(e.syncedAt+b.sync-n), time.Nanosecond)
	}
	return d
}

// syncKey reads key's state from the KV, merges it with e, decides (or
// refunds) and writes the result back. e.syncing is set; syncKey clears it.
func (b *Bucket) syncKey(ctx context.Context, s *shard, e *entry, n int64, cost int64, refund bool) (edgelimit.Decision, error) {
	kvKey := b.prefix + e.key
	k, found, err := b.kv.Get(ctx, kvKey, Eventual)

	s.mu.Lock()
	if err != nil {
		s.stats.Errors++
		b.endSync(e)
		s.mu.Unlock()
		return edgelimit.Decision{}, err
	}
	full := State{Tokens: b.p.Capacity * TokenScale, At: n}
	kvNow := full
	if found {
		kvNow = b.p.refill(k, n)
	}
	// The lower token count wins. Ours is exact when the KV holds what we
	// last wrote (nobody else wrote since) or nothing (absent = full).
	merged := full
	if e.known {
		merged = b.p.refill(e.local, n)
	}
	mine := !found || (e.hasWritten && k == e.written)
	if !mine {
		// Another instance wrote. Its state lacks what this instance spent
		// since its own last write, and what its writes stamped after that
		// state carried (the other instance read before they landed, and
		// overwrote them): take both off before comparing.
		o := k
		o.Tokens = min(max(o.Tokens, 0)-e.pending-e.lostSince(k.At), b.p.Capacity*TokenScale)
		if o = b.p.refill(o, n); !e.known || o.Tokens < merged.Tokens {
			merged = o
		}
	}
	e.known, e.contended = true, !mine

	var d edgelimit.Decision
	next := merged
	if refund {
		next = b.p.add(merged, cost)
	} else {
		var ok bool
		var st State
		st, d, ok = b.p.take(merged, n, cost)
		if ok {
			next = st
		}
	}
	// own is this instance's spending that the write carries first.
	own := e.pending + merged.Tokens - next.Tokens
	e.local = next
	synced := e.pending
	if next.Tokens == kvNow.Tokens && !(found && restamped(k, n)) {
		// Nothing the KV does not know: no write.
		e.pending -= synced
		e.written, e.hasWritten = k, found
		b.endSync(e)
		s.mu.Unlock()
		return d, nil
	}
	s.mu.Unlock()

	// Keep the state until the bucket would be full anyway (and a second
	// more for clock skew); saturating, for buckets that refill for ages.
	ttl := b.p.untilTokens(next, n, b.p.Capacity*TokenScale)
	ttl += min(time.Second, math.MaxInt64-ttl)
	err = b.kv.Put(ctx, kvKey, next, ttl)

	s.mu.Lock()
	defer s.mu.Unlock()
	defer b.endSync(e)
	if err != nil {
		s.stats.Errors++
		switch {
		case refund:
			// Keep the refund locally; the next sync writes it.
			e.pending -= next.Tokens - merged.Tokens
		case d.Allowed:
			// This request spent nothing after all.
			e.local = b.p.add(e.local, cost)
		}
		return edgelimit.Decision{}, err
	}
	s.stats.Writes++
	e.pending -= synced
	e.written, e.hasWritten = next, true
	e.remember(next.At, own)
	return d, nil
}

// endSync marks e's sync finished and wakes waiters. s.mu is held.
func (b *Bucket) endSync(e *entry) {
	e.syncing = false
	if e.wait != nil {
		close(e.wait)
		e.wait = nil
	}
}
