package kvbucket

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
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
	// refill rate and the burst (its Options; default Limit) the bucket
	// size; both at most MaxTokens, Window positive. A Limit of 0 denies
	// every request without touching the KV. Cost is not read: each Request
	// carries its own.
	Policy *edgelimit.Policy
	// Options, if set, are the bucket's burst and sync interval; default
	// the Policy's Options (what its file said), else the zero Options.
	Options *Options
	// KV stores the buckets, shared by every instance. Required: a
	// *DynamoDB on AWS, a *Memory for one process.
	KV KV
	// Now is the clock of Allow, Refund and Peek. When set it is the
	// bucket's own and wins over Request.At (tests that inject one keep
	// it); when nil they use Request.At, or time.Now when that is zero.
	Now func() time.Time
	// CacheSize bounds the keys whose state this process keeps (about 200
	// bytes each); beyond it a least recently used key is dropped (sampled
	// LRU). Default DefaultCacheSize (10,000). Dropping never loses
	// spending: a key with spending the KV does not know yet is written
	// back first (see the package documentation).
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
//
// An allowed Decision's Receipt records what it spent, for Refund: At is
// the instant (Unix nanoseconds), Slot the tokens, ID this Bucket and the
// key.
type Bucket struct {
	prefix   string
	p        Params
	kv       KV
	now      func() time.Time
	ownClock bool  // Config.Now was set: it wins over Request.At
	sync     int64 // SyncInterval in nanoseconds
	noCache  bool
	closed   bool   // Limit 0: deny everything
	id       uint64 // random: names this Bucket in its receipts
	cache    *cache
	// cfg is what New was given, for Local.
	cfg Config
}

var (
	_ edgelimit.Limiter  = (*Bucket)(nil)
	_ edgelimit.Refunder = (*Bucket)(nil)
	_ edgelimit.Peeker   = (*Bucket)(nil)
	_ interface {
		Local() (edgelimit.Limiter, error)
	} = (*Bucket)(nil)
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
	if pol.Strategy != nil && pol.Strategy != Strategy {
		return nil, fmt.Errorf("%w: policy %q has strategy %q, not kv", ErrBadConfig, pol.Name, pol.Strategy.Name)
	}
	opts, err := options(cfg)
	if err != nil {
		return nil, err
	}
	if opts.SyncInterval < 0 {
		return nil, fmt.Errorf("%w: policy %q: sync interval %s is negative", ErrBadConfig, pol.Name, opts.SyncInterval)
	}
	capacity := pol.Limit
	if opts.Burst > 0 {
		capacity = opts.Burst
	}
	if cfg.CacheSize < 0 {
		return nil, fmt.Errorf("%w: policy %q: cache size %d is negative", ErrBadConfig, pol.Name, cfg.CacheSize)
	}
	b := &Bucket{
		prefix:   pol.Name + "#",
		p:        Params{Capacity: capacity, Limit: pol.Limit, Window: pol.Window},
		kv:       cfg.KV,
		now:      cfg.Now,
		ownClock: cfg.Now != nil,
		sync:     int64(opts.SyncInterval),
		noCache:  cfg.NoCache,
		closed:   pol.Limit == 0,
		id:       rand.Uint64(),
		cfg:      cfg,
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
	b.cache = newCache(size, b.p)
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
// the bucket holds them. A key this process synced less than SyncInterval
// ago is decided from local state, without a KV call; otherwise the KV is
// read (eventually consistent; strongly for a key this process holds no
// state of), merged with the local state (the lower token count wins), the
// request decided, and the result written back (only when it changed the
// state). An error means the KV failed or ctx ended; the request then spent
// nothing.
func (b *Bucket) AllowAt(ctx context.Context, now time.Time, req edgelimit.Request) (edgelimit.Decision, error) {
	if err := checkKey(req.Key); err != nil {
		return edgelimit.Decision{}, err
	}
	if b.closed {
		return b.closedDecision(), nil
	}
	var d edgelimit.Decision
	if err := b.do(ctx, now.UnixNano(), req.Key, req.Units(), opAllow, &d); err != nil {
		return edgelimit.Decision{}, err
	}
	return d, nil
}

// closedDecision is the denial of a policy with limit 0.
func (b *Bucket) closedDecision() edgelimit.Decision {
	return edgelimit.Decision{Limit: 0, Window: b.p.Window, Reset: b.p.Window, RetryAfter: b.p.Window}
}

// Refund gives back exactly what d spent: d is the allowed Decision that
// Allow (or AllowAt) of this Bucket returned for req, and its Receipt's
// tokens go back into req.Key's bucket at req's instant (see Allow), never
// beyond capacity. (For a token bucket that is the same as giving them back
// at d.Receipt.At: refill adds the same, capped the same.) A decision that
// spent nothing (denied, or degraded by the engine) refunds nothing. A
// receipt of another Bucket or key, or one that spent nothing, is
// ErrBadReceipt and changes nothing. See RefundAt for where the tokens go.
func (b *Bucket) Refund(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	if err := checkKey(req.Key); err != nil {
		return err
	}
	if !d.Allowed || d.Degraded {
		return nil
	}
	_, h := b.cache.shard(req.Key)
	if d.Receipt.ID != b.receiptID(h) || d.Receipt.Slot < 1 || b.closed {
		return fmt.Errorf("%w: policy %q: the decision was not spent by this bucket for this key", ErrBadReceipt, b.prefix[:len(b.prefix)-1])
	}
	var none edgelimit.Decision
	return b.do(ctx, b.instant(req).UnixNano(), req.Key, d.Receipt.Slot, opRefund, &none)
}

// RefundAt adds req.Units() tokens back to req.Key's bucket at now, never
// beyond capacity. With the key's state in the cache the refund is local
// and reaches the KV with the next sync (or, if the key is dropped from
// the cache first, before it is dropped; at once with NoCache); otherwise
// it reads and writes the KV. Refund, which takes the tokens from the
// decision's receipt, is the engine's way in.
func (b *Bucket) RefundAt(ctx context.Context, now time.Time, req edgelimit.Request) error {
	if err := checkKey(req.Key); err != nil {
		return err
	}
	if b.closed {
		return nil
	}
	var none edgelimit.Decision
	return b.do(ctx, now.UnixNano(), req.Key, req.Units(), opRefund, &none)
}

// Peek tells whether req would be allowed at its instant (see Allow), and
// the bucket's state, without spending anything. See PeekAt.
func (b *Bucket) Peek(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	return b.PeekAt(ctx, b.instant(req), req)
}

// PeekAt tells whether req would be allowed at now, and the bucket's
// state, without spending anything and without writing to the KV or adding
// the key to the cache. It answers as AllowAt would, from the same state: a
// key synced less than SyncInterval ago from its local state, without a KV
// call; any other with one KV read merged as a sync merges it. An allowed
// answer reports the state without req (Remaining is what is left now),
// carries no Receipt and is not to be refunded; a denial is one that Allow
// would give at that instant.
func (b *Bucket) PeekAt(ctx context.Context, now time.Time, req edgelimit.Request) (edgelimit.Decision, error) {
	if err := checkKey(req.Key); err != nil {
		return edgelimit.Decision{}, err
	}
	if b.closed {
		return b.closedDecision(), nil
	}
	n, cost := now.UnixNano(), req.Units()
	s, h := b.cache.shard(req.Key)
	s.mu.Lock()
	e := s.find(req.Key, h)
	var d edgelimit.Decision
	if e != nil && e.known && (e.syncing || !b.due(e, n, opPeek)) {
		b.local(e, n, cost, opPeek, &d)
		s.stats.Local++
		s.mu.Unlock()
		return d, nil
	}
	c := Strong
	if e != nil && e.known {
		c = Eventual
	}
	s.stats.Synced++
	s.mu.Unlock()

	k, found, err := b.kv.Get(ctx, b.prefix+req.Key, c)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.stats.Errors++
		return edgelimit.Decision{}, err
	}
	if e = s.find(req.Key, h); e != nil && e.known && e.syncing {
		// A sync is writing what this read may or may not have seen: the
		// local state is what Allow decides from now.
		b.local(e, n, cost, opPeek, &d)
		return d, nil
	}
	merged, _, _ := b.merge(e, k, found, n)
	b.p.peek(merged, n, cost, &d)
	return d, nil
}

// receipt records that cost tokens of the key of hash h were spent at n.
func (b *Bucket) receipt(n, cost int64, h uint64) edgelimit.Receipt {
	return edgelimit.Receipt{At: n, Slot: cost, ID: b.receiptID(h)}
}

// receiptID names this Bucket and the key of hash h in a receipt.
func (b *Bucket) receiptID(h uint64) [16]byte {
	var id [16]byte
	binary.LittleEndian.PutUint64(id[:8], b.id)
	binary.LittleEndian.PutUint64(id[8:], h)
	return id
}

// Stats are counters of one Bucket since New.
type Stats struct {
	// Local counts decisions, refunds and peeks made from local state
	// alone.
	Local uint64
	// Synced counts decisions, refunds and peeks that read the KV.
	Synced uint64
	// Writes counts successful KV writes.
	Writes uint64
	// Errors counts failed KV calls.
	Errors uint64
	// Evicted counts keys dropped from the cache to respect CacheSize.
	Evicted uint64
	// Flushed counts the write-backs of keys chosen for eviction that held
	// spending (or refunds) the KV did not know yet: eviction writes them
	// back (one read and at most one write) before it drops them.
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
		t.Writes += s.stats.Writes
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

// op is what a call does to a key's bucket.
type op uint8

const (
	opAllow  op = iota // decide, spending when allowed
	opRefund           // give tokens back
	opPeek             // decide without spending or writing
	opFlush            // write back what the KV does not know, then drop the entry
)

// do decides (or refunds) cost units of key at n, into d (which is zero).
// On an error d is to be ignored.
func (b *Bucket) do(ctx context.Context, n int64, key string, cost int64, o op, d *edgelimit.Decision) error {
	s, h := b.cache.shard(key)
	for {
		s.mu.Lock()
		e, victim := s.lookup(key, h, n)
		if e.known && (e.syncing || !b.due(e, n, o)) {
			// (A new entry is never known: victim is nil here.)
			b.local(e, n, cost, o, d)
			s.stats.Local++
			s.mu.Unlock()
			return nil
		}
		if e.syncing {
			// The first sync of this key is in flight: its answer is the
			// only state there is. (An existing entry: victim is nil.)
			w := e.wait
			s.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return fmt.Errorf("kvbucket: wait for the sync of %q: %w", b.prefix+key, ctx.Err())
			}
		}
		e.syncing = true
		e.syncedAt = n
		if !e.known {
			e.wait = make(chan struct{})
		}
		s.stats.Synced++
		s.mu.Unlock()
		err := b.syncKey(ctx, s, e, n, cost, o, d)
		if err == nil && d.Allowed {
			d.Receipt = b.receipt(n, cost, h)
		}
		if victim != nil {
			// Making room for key chose an entry with spending the KV does
			// not know yet: write it back before dropping it. This
			// request's own decision is made first, so that a slow or
			// failed write-back cannot fail it: the write-back gets what is
			// left of the request's budget (ctx), and its failure is not
			// this request's.
			b.flush(ctx, s, victim, n)
		}
		return err
	}
}

// flush writes back what the KV does not know of victim (marked syncing by
// evict) and drops it from the cache. When the write fails, or requests
// spent from it meanwhile, it stays, dirty, for a later eviction to try
// again: spending is never dropped unwritten.
func (b *Bucket) flush(ctx context.Context, s *shard, victim *entry, n int64) {
	// An error is counted in Stats.Errors; the entry stays.
	var none edgelimit.Decision
	_ = b.syncKey(ctx, s, victim, n, 0, opFlush, &none)
}

// due reports whether e must be synced before o at n.
func (b *Bucket) due(e *entry, n int64, o op) bool {
	if b.noCache {
		return true
	}
	if o == opRefund {
		return false
	}
	since := n - e.syncedAt
	return since >= b.sync || since < -b.sync
}

// local decides (or refunds, or peeks) from e alone, into d (which is
// zero). s.mu is held.
func (b *Bucket) local(e *entry, n int64, cost int64, o op, d *edgelimit.Decision) {
	if !e.contended {
		r := b.p.refill(e.local, n)
		switch o {
		case opRefund:
			e.local = b.p.add(r, cost)
			e.pending -= e.local.Tokens - r.Tokens
			return
		case opPeek:
			b.p.peek(r, n, cost, d)
			return
		}
		st, ok := b.p.take(r, n, cost, d)
		if ok {
			e.local = st
			e.pending += cost * TokenScale
			d.Receipt = b.receipt(n, cost, e.hash)
		} else if restamped(e.local, n) {
			e.local = st
		}
		return
	}
	// Contended: other instances spend this key too, and tokens refilled
	// since the sync may be spent by each of them. Spend only what the sync
	// saw (e.local is stamped then), until the next sync refills it.
	frozen := b.p.refill(e.local, e.local.At)
	switch o {
	case opRefund:
		e.local = b.p.add(frozen, cost)
		e.pending -= e.local.Tokens - frozen.Tokens
		return
	case opPeek:
		b.p.peek(frozen, frozen.At, cost, d)
	default:
		if st, ok := b.p.take(frozen, frozen.At, cost, d); ok {
			e.local = st
			e.pending += cost * TokenScale
			d.Receipt = b.receipt(n, cost, e.hash)
		}
	}
	// The durations were counted from the sync; shift them to now. No
	// token comes back before the next sync (unless one is in flight, which
	// refills up to its start), and a denial lasts at least until then.
	elapsed := time.Duration(max(n-frozen.At, 0))
	var untilSync time.Duration
	if !e.syncing && !b.noCache {
		untilSync = time.Duration(max(e.syncedAt+b.sync-n, 0))
	}
	d.Reset = max(d.Reset-elapsed, untilSync, 0)
	if !d.Allowed {
		d.RetryAfter = max(d.RetryAfter-elapsed, untilSync, d.Reset, time.Nanosecond)
	}
}

// merge returns the state a sync of e at n starts from, given what the KV
// returned (k, found): the lower token count of e's and the KV's wins;
// kvNow is the KV's state refilled to n, and mine reports that the KV holds
// what this instance last wrote (or nothing), so e's state is exact. e may
// be nil (a peek of a key with no entry) or unknown: the KV's state is
// then all there is. s.mu is held.
func (b *Bucket) merge(e *entry, k State, found bool, n int64) (merged, kvNow State, mine bool) {
	full := State{Tokens: b.p.Capacity * TokenScale, At: n}
	kvNow = full
	if found {
		kvNow = b.p.refill(k, n)
	}
	if e == nil {
		return kvNow, kvNow, !found
	}
	// Ours is exact when the KV holds what we last wrote (nobody else wrote
	// since) or nothing (absent = full).
	merged = full
	if e.known {
		merged = b.p.refill(e.local, n)
	}
	mine = !found || (e.hasWritten && k == e.written)
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
	return merged, kvNow, mine
}

// syncKey reads key's state from the KV, merges it with e, decides (or
// refunds, or flushes) and writes the result back. e.syncing is set;
// syncKey clears it. The read is eventually consistent, except for a key
// whose entry holds no state yet (new, or dropped and read back): that one
// is strongly consistent, because an eventually consistent read could
// return a state older than this instance's own last write, from before
// the entry was dropped, and admit again what was already spent.
func (b *Bucket) syncKey(ctx context.Context, s *shard, e *entry, n int64, cost int64, o op, d *edgelimit.Decision) error {
	kvKey := b.prefix + e.key
	c := Eventual
	if !e.known {
		c = Strong
	}
	k, found, err := b.kv.Get(ctx, kvKey, c)

	s.mu.Lock()
	if err != nil {
		s.stats.Errors++
		b.endSync(e)
		s.mu.Unlock()
		return err
	}
	merged, kvNow, mine := b.merge(e, k, found, n)
	e.known, e.contended = true, !mine

	next := merged
	switch o {
	case opRefund:
		next = b.p.add(merged, cost)
	case opAllow:
		if st, ok := b.p.take(merged, n, cost, d); ok {
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
		b.dropFlushed(s, e, o)
		s.mu.Unlock()
		return nil
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
		case o == opRefund:
			// Keep the refund locally; the next sync writes it.
			e.pending -= next.Tokens - merged.Tokens
		case d.Allowed:
			// This request spent nothing after all.
			e.local = b.p.add(e.local, cost)
		}
		return err
	}
	s.stats.Writes++
	e.pending -= synced
	e.written, e.hasWritten = next, true
	e.remember(next.At, own)
	b.dropFlushed(s, e, o)
	return nil
}

// dropFlushed ends a successful flush: e is dropped unless requests spent
// from it while it was written back (they were decided locally, since the
// flush marked it syncing). s.mu is held.
func (b *Bucket) dropFlushed(s *shard, e *entry, o op) {
	if o != opFlush {
		return
	}
	s.stats.Flushed++
	if e.pending == 0 {
		s.remove(e)
	}
}

// endSync marks e's sync finished and wakes waiters. s.mu is held.
func (b *Bucket) endSync(e *entry) {
	e.syncing = false
	if e.wait != nil {
		close(e.wait)
		e.wait = nil
	}
}

// Quota returns what the bucket's decisions tell the client in
// RateLimit-Policy: its burst over the time it takes to fill.
func (b *Bucket) Quota() (limit int64, window time.Duration) { return b.p.Advertised() }
