package kvbucket

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/edgelimit/edgelimit"
)

// DefaultSyncInterval is how often a hot key is written back (and its share
// of the bucket renewed) when the policy leaves sync_interval unset: about
// the replication lag of an eventually consistent read, so the cache adds
// little staleness to what the KV already has.
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
	// CacheSize bounds the keys whose state this process keeps (about 300
	// bytes each); beyond it a least recently used key is dropped (sampled
	// LRU). Default DefaultCacheSize (10,000). Dropping never loses
	// spending: a key with spending the KV does not know yet is written
	// back first (see the package documentation).
	CacheSize int
	// NoCache makes every admission a conditional write of its own to the
	// KV (a reservation that lands only if it fits) instead of deciding a
	// hot key locally between syncs; default false. Denials the local state
	// proves are still answered without a call.
	NoCache bool
}

// policyParams are the parts of a policy the bucket uses.
type policyParams struct {
	name   string
	params Params
	sync   time.Duration
	cost   int64
	closed bool
}

// paramsOf reads every Policy field and option the bucket uses, and only
// here.
func paramsOf(cfg Config) (policyParams, error) {
	p := cfg.Policy
	if p.Strategy != nil && p.Strategy != Strategy {
		return policyParams{}, fmt.Errorf("%w: policy %q has strategy %q, not kv", ErrBadConfig, p.Name, p.Strategy.Name)
	}
	opts, err := options(cfg)
	if err != nil {
		return policyParams{}, err
	}
	capacity := p.Limit
	if opts.Burst > 0 {
		capacity = opts.Burst
	}
	return policyParams{
		name:   p.Name,
		params: Params{Capacity: capacity, Limit: p.Limit, Window: p.Window},
		sync:   opts.SyncInterval,
		cost:   p.Cost,
		closed: p.Limit == 0,
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
	if cfg.Policy == nil {
		return nil, fmt.Errorf("%w: Config.Policy is required", ErrBadConfig)
	}
	pp, err := paramsOf(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.KV == nil {
		return nil, fmt.Errorf("%w: policy %q: Config.KV is required", ErrBadConfig, pp.name)
	}
	if pp.sync < 0 {
		return nil, fmt.Errorf("%w: policy %q: sync interval %s is negative", ErrBadConfig, pp.name, pp.sync)
	}
	if cfg.CacheSize < 0 {
		return nil, fmt.Errorf("%w: policy %q: cache size %d is negative", ErrBadConfig, pp.name, cfg.CacheSize)
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
		cfg:      cfg,
	}
	b.writer = uint32(b.id>>32) | 1
	if b.closed {
		b.p.Capacity = 0
		if b.p.Window <= 0 {
			return nil, fmt.Errorf("%w: policy %q: window %s is not positive", ErrBadConfig, pp.name, b.p.Window)
		}
	} else if err := b.p.Validate(); err != nil {
		return nil, fmt.Errorf("%w (policy %q)", err, pp.name)
	}
	if pp.cost > b.p.Capacity && !b.closed {
		return nil, fmt.Errorf("%w: policy %q: cost %d is more than the capacity %d: every request would be denied",
			ErrBadConfig, pp.name, pp.cost, b.p.Capacity)
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
	if !b.closed {
		b.u = newUnits(b.p)
	}
	b.cache = newCache(size, &b.u)
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
// at d.Receipt.At: refill adds the same, capped the same.) In the KV it is
// an addition of minus those tokens to what this region spent, never more.
// A decision that spent nothing (denied, or degraded by the engine)
// refunds nothing. A receipt of another Bucket or key, or one that spent
// nothing, is ErrBadReceipt and changes nothing. See RefundAt for where the
// tokens go.
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
// beyond capacity. With the key's share in the cache the refund is local
// and reaches the KV with the next sync (or, if the key is dropped from the
// cache first, before it is dropped); otherwise (a key this process does
// not know, one in its first sync interval, NoCache) it is written at once.
// Refund, which takes the tokens from the decision's receipt, is the
// engine's way in.
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
// the key to the cache. It answers from the state Allow would decide from:
// a key with a current share (or in its first sync interval, or whose KV
// failed a moment ago) from its local state, without a KV call; any other
// with one KV read (strongly consistent for a key this process does not
// know) merged with this instance's unwritten changes. A denial it reports
// is one Allow would give at that instant (the local state can only
// overstate the bucket); an allowed answer reports the state without req
// (Remaining is what is left now), carries no Receipt and is not to be
// refunded.
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
	if e != nil && e.known && (e.syncing || b.degraded(e, n) || b.through(e, n) || b.shareValid(e, n)) {
		b.peekLocal(e, n, cost, &d)
		s.stats.Local++
		s.mu.Unlock()
		return d, nil
	}
	c := Strong
	if e != nil && e.known {
		c = Eventual
	}
	s.stats.Synced++
	s.stats.Reads++
	s.mu.Unlock()

	t, err := b.kv.Get(ctx, b.prefix+req.Key, c)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.stats.Errors++
		return edgelimit.Decision{}, err
	}
	var v view
	v.own = t.Own
	v.setOthers(&b.u, t.Others)
	tat := v.tat(&b.u)
	if e = s.find(req.Key, h); e != nil && e.known {
		// The read may or may not hold what a sync in flight writes:
		// count it, as Allow would.
		tat = b.withInflight(e, e.pend.apply(e.flight.apply(tat)), n)
	}
	b.u.peek(tat, n, cost, &d)
	return d, nil
}

// peekLocal answers a peek from e's local state, as Allow would decide.
// s.mu is held.
func (b *Bucket) peekLocal(e *entry, n, cost int64, d *edgelimit.Decision) {
	b.u.peek(b.local(e, n), n, cost, d)
	if d.Allowed && !b.degraded(e, n) && !b.through(e, n) && e.insts > 1 {
		// The share limits this instance too.
		var sd edgelimit.Decision
		if !b.withinShare(e, n, cost, &sd) {
			*d = sd
		}
	}
}

// withInflight returns tat with the write-throughs of e in flight spent
// at n. s.mu is held.
func (b *Bucket) withInflight(e *entry, tat Wide, n int64) Wide {
	if e.inflight.Sign() == 0 {
		return tat
	}
	return maxWide(tat, b.u.at(n)).Add(e.inflight)
}

// local returns the bucket's TAT as this instance knows it at n: what the
// KV last said, with what a sync in flight writes, this instance's
// unwritten changes and the reservations in flight. s.mu is held.
func (b *Bucket) local(e *entry, n int64) Wide {
	if !e.busy {
		return e.pend.apply(e.tat)
	}
	return b.withInflight(e, e.pend.apply(e.flight.apply(e.tat)), n)
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

// opKind is what a call does to a key's bucket.
type opKind uint8

const (
	opAllow  opKind = iota // decide, spending when allowed
	opRefund               // give tokens back
	opFlush                // write back what the KV does not know, then drop the entry
)

// degraded reports that a store call of e failed less than a sync interval
// ago: e is decided from its local state alone until then, so that a broken
// KV costs one error per key per sync interval.
func (b *Bucket) degraded(e *entry, n int64) bool {
	return n < e.degradedUntil && n > e.degradedUntil-2*b.sync
}

// through reports that e's admissions are written through (a conditional
// reservation each): with NoCache, and during e's first sync interval in
// this process, while it cannot know how many instances share the key.
func (b *Bucket) through(e *entry, n int64) bool {
	return b.noCache || n-e.firstAt < b.sync && n-e.firstAt > -b.sync
}

// shareValid reports whether e holds a share granted after its probation
// that may still be spent at n: for a sync interval after the grant, and
// while the sync that renews it is in flight.
func (b *Bucket) shareValid(e *entry, n int64) bool {
	if !e.granted {
		return false
	}
	if e.syncing {
		return true
	}
	since := n - e.grantAt
	return since < b.sync && since > -b.sync
}

// budget returns the units e's share allows in all at n, times insts:
// grantR + (n − grantAt)·Limit.
func (b *Bucket) budget(e *entry, n int64) Wide {
	return e.grantR.Add(b.u.at(max(n-e.grantAt, 0)))
}

// withinShare reports whether cost more tokens at n fit e's share; when
// they do not, it fills d with the denial (Remaining and the waits counted
// in the share, bounded by when the next sync may renew it). s.mu is held.
func (b *Bucket) withinShare(e *entry, n, cost int64, d *edgelimit.Decision) bool {
	if e.insts <= 1 {
		return true
	}
	need := b.u.tokens(cost)
	total := b.budget(e, n)
	used := mulK(e.spent.Add(need), e.insts)
	if !total.Less(used) {
		return true
	}
	// left is this instance's share left, in units, times insts.
	left := total.Sub(mulK(e.spent, e.insts))
	d.Limit, d.Window = b.u.advQ, b.u.advW
	d.Remaining = 0
	var k int64
	if left.Sign() > 0 {
		k = left.div(b.u.w, false) / e.insts
		d.Remaining = min(k, b.p.Capacity)
	}
	// The share grows by Limit units a nanosecond, shared by insts.
	nextTok := b.u.dur(mulK(b.u.tokens(k+1), e.insts).Sub(left))
	fit := b.u.dur(used.Sub(total))
	untilSync := time.Duration(max(e.grantAt+b.sync-n, 1))
	if e.syncing {
		untilSync = time.Nanosecond
	}
	d.Reset = max(min(nextTok, untilSync), time.Nanosecond)
	d.RetryAfter = max(min(fit, untilSync), d.Reset, time.Nanosecond)
	return false
}

// mulK returns w×k for k ≥ 1, w of either sign.
func mulK(w Wide, k int64) Wide {
	if w.Sign() < 0 {
		return w.neg().mulSmall(k).neg()
	}
	return w.mulSmall(k)
}

// do decides (or refunds, or flushes) cost units of key at n, into d
// (which is zero). On an error d is to be ignored.
func (b *Bucket) do(ctx context.Context, n int64, key string, cost int64, o opKind, d *edgelimit.Decision) error {
	s, h := b.cache.shard(key)
	var victim *entry
	defer func() {
		if victim != nil {
			// Making room for key chose an entry with spending the KV does
			// not know yet: write it back before dropping it. This
			// request's own decision is made first, so that a slow or
			// failed write-back cannot fail it: the write-back gets what is
			// left of the request's budget (ctx), and its failure is not
			// this request's.
			b.flush(ctx, s, victim, n)
		}
	}()
	for {
		s.mu.Lock()
		e, v := s.lookup(key, h, n)
		if v != nil {
			victim = v
		}
		if !e.known {
			if e.syncing {
				// The first read of this key is in flight: its answer is
				// the only state there is.
				w := e.wait
				s.mu.Unlock()
				select {
				case <-w:
					continue
				case <-ctx.Done():
					return fmt.Errorf("kvbucket: wait for the first read of %q: %w", b.prefix+key, ctx.Err())
				}
			}
			if err := b.firstRead(ctx, s, e, n); err != nil {
				return err
			}
			continue
		}
		var w chan struct{}
		var err error
		switch o {
		case opRefund:
			return b.refund(ctx, s, e, n, cost)
		default:
			w, err = b.allow(ctx, s, e, n, cost, d)
		}
		if w == nil {
			return err
		}
		// A write-through of this key is in flight: its answer decides
		// this request too, most often from the local state (a bucket it
		// emptied denies without a call).
		select {
		case <-w:
			*d = edgelimit.Decision{}
		case <-ctx.Done():
			return fmt.Errorf("kvbucket: wait for the write of %q: %w", b.prefix+key, ctx.Err())
		}
	}
}

// firstRead reads the state of a key this process holds none for (new to
// it, or dropped from the cache), strongly consistent: an eventually
// consistent read just after this instance's own write could return an
// older, fuller state. s.mu is held on entry and released on return.
func (b *Bucket) firstRead(ctx context.Context, s *shard, e *entry, n int64) error {
	e.syncing = true
	e.wait = make(chan struct{})
	s.stats.Synced++
	s.stats.Reads++
	s.mu.Unlock()
	t, err := b.kv.Get(ctx, b.prefix+e.key, Strong)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer b.endSync(e)
	if err != nil {
		s.stats.Errors++
		return err
	}
	e.known, e.firstAt, e.syncedAt = true, n, n
	e.rid = b.receiptID(e.hash)
	b.learn(e, t)
	return nil
}

// learn takes what the KV answered into e's view (the later state of each
// part wins; see view.learn). s.mu is held.
func (b *Bucket) learn(e *entry, t Tally) {
	e.v.learn(&b.u, t)
	e.tat = e.v.tat(&b.u)
}

// allow decides a request of cost at n for the known entry e. s.mu is held
// on entry and released on return. A non-nil channel means the request
// must wait for the write-through in flight to end, then be decided again.
func (b *Bucket) allow(ctx context.Context, s *shard, e *entry, n, cost int64, d *edgelimit.Decision) (chan struct{}, error) {
	// What is in flight counts as spent until its answer comes.
	tat := b.local(e, n)
	if !b.u.decide(tat, n, cost, d) {
		// The local state can only overstate what the bucket holds: the KV
		// would deny too. Unwritten changes still go out once a sync is
		// due, and a state from a clock far ahead is repaired.
		ready := !e.syncing && e.inflight.Sign() == 0 && !b.degraded(e, n) && !b.shareValid(e, n)
		if insane := b.insane(e, n); ready && (e.pend.has || insane) {
			*d = edgelimit.Decision{}
			return nil, b.syncKey(ctx, s, e, n, 0, cost, insane, d)
		}
		s.stats.Local++
		s.mu.Unlock()
		return nil, nil
	}
	switch {
	case b.degraded(e, n):
		// The KV failed a moment ago: decide as if alone until the next
		// attempt is due.
		b.spendLocal(e, n, cost, d)
	case b.through(e, n) || !b.shareValid(e, n) && e.syncing:
		*d = edgelimit.Decision{}
		if e.pend.has && !e.syncing {
			return nil, b.syncKey(ctx, s, e, n, cost, cost, false, d)
		}
		if w := e.writing; w != nil {
			// One write-through at a time per key: a cold burst at one
			// instance costs the KV one conditional write per admission
			// (and one that finds the bucket empty), not one per request.
			s.mu.Unlock()
			return w, nil
		}
		return nil, b.writeThrough(ctx, s, e, n, cost, d)
	case b.shareValid(e, n):
		var sd edgelimit.Decision
		if !b.withinShare(e, n, cost, &sd) {
			*d = sd
			break
		}
		b.spendLocal(e, n, cost, d)
	default:
		*d = edgelimit.Decision{}
		return nil, b.syncKey(ctx, s, e, n, cost, cost, false, d)
	}
	s.stats.Local++
	s.mu.Unlock()
	return nil, nil
}

// spendLocal spends cost at n from e's local state (which allows it) into
// d. s.mu is held.
func (b *Bucket) spendLocal(e *entry, n, cost int64, d *edgelimit.Decision) {
	w := b.u.tokens(cost)
	e.pend.thenSpend(b.u.at(n), w, cost)
	if e.syncing {
		e.spentFlight = e.spentFlight.Add(w)
	}
	e.spent = e.spent.Add(w)
	if e.insts > 1 && !b.degraded(e, n) {
		// Remaining counts in the share as well as in the bucket.
		var sd edgelimit.Decision
		if !b.withinShare(e, n, d.Remaining+1, &sd) && sd.Remaining < d.Remaining {
			d.Remaining, d.Reset = sd.Remaining, sd.Reset
		}
	}
	d.Receipt = edgelimit.Receipt{At: n, Slot: cost, ID: e.rid}
}

// insane reports that this region's part of e is far ahead of n (more
// than MaxClockSkew beyond a bucket spent empty twice over): written by a
// clock far ahead, it is repaired (set to an empty bucket at n) rather than
// waited out. s.mu is held.
func (b *Bucket) insane(e *entry, n int64) bool {
	if !e.v.own.Has {
		return false
	}
	own := e.v.own.TAT.Add(b.u.tokens(e.v.so))
	return b.u.limit(n).Add(b.u.bw).Add(b.u.at(int64(MaxClockSkew))).Less(own)
}

// ttl is how long the KV must keep a part after an update at n that leaves
// the bucket at tat: until it has drained, then a full refill more (for
// what other instances spent meanwhile), and a second for clock skew.
func (b *Bucket) ttl(tat Wide, n int64) time.Duration {
	return satAdd(satAdd(b.u.dur(tat.Sub(b.u.at(n))), b.u.fill()), time.Second)
}

// update completes an Update of e's view with this instance's registration
// and the part's lifetime. s.mu is held.
func (b *Bucket) update(e *entry, o op, n int64, conditional bool) Update {
	up := e.v.update(&b.u, o, n, conditional)
	if e.granted && e.insts > 1 && n-e.grantAt < 2*b.sync {
		// Others spent this key a sync interval ago: a view that has
		// refilled since is most likely behind their spending, so the add
		// goes first (a raise guessed wrong costs a second call).
		up.RaiseFirst = false
	}
	up.Writer = b.writer
	up.Epoch = epochOf(n, b.sync)
	up.Stale = e.v.stale(up.Epoch)
	up.TTL = b.ttl(o.apply(e.tat), n)
	return up
}

// writeThrough reserves cost at n in the KV with a conditional update
// that lands only if it fits, and decides from the answer. Several may be
// in flight for one key; each counts what the others reserve. s.mu is held
// on entry and released on return.
func (b *Bucket) writeThrough(ctx context.Context, s *shard, e *entry, n, cost int64, d *edgelimit.Decision) error {
	sp := b.u.spend(n, cost)
	if !b.u.decide(b.local(e, n), n, cost, d) {
		// What is in flight already holds the rest of the bucket.
		s.stats.Local++
		s.mu.Unlock()
		return nil
	}
	*d = edgelimit.Decision{}
	up := b.update(e, sp, n, true)
	e.inflight = e.inflight.Add(sp.p)
	e.setBusy()
	e.writing = make(chan struct{})
	s.stats.Synced++
	s.mu.Unlock()

	t, err := b.kv.Update(ctx, b.prefix+e.key, up)
	s.mu.Lock()
	defer s.mu.Unlock()
	e.inflight = e.inflight.Sub(sp.p)
	e.setBusy()
	close(e.writing)
	e.writing = nil
	if err != nil {
		s.stats.Errors++
		e.degradedUntil = n + b.sync
		return err
	}
	b.learn(e, t)
	after := b.local(e, n)
	if t.Applied {
		s.stats.Writes++
		b.u.report(b.u.avail(after, n), d)
		d.Allowed = true
		d.Receipt = b.receipt(n, cost, e.hash)
		return nil
	}
	s.stats.Rejected++
	if b.u.decide(after, n, cost, d) {
		// The KV saw less than this answer shows (another write landed in
		// between): its word is final.
		d.Allowed = false
		d.RetryAfter = max(d.Reset, time.Nanosecond)
	}
	return nil
}

// syncKey writes e's unwritten changes and, with cost > 0, the request's
// spending at n in one unconditional update, learns the bucket's state
// from the answer, decides the request from it (undoing its reservation
// with the next write when it did not fit) and, after probation, grants
// this instance its share until the next sync. With cost 0 it only writes,
// and reports a denial of a request of report tokens (when report > 0):
// the one whose local denial found changes to write. With repair it also
// lowers this region's part from a clock far ahead. s.mu is held on entry
// and released on return.
func (b *Bucket) syncKey(ctx context.Context, s *shard, e *entry, n, cost, report int64, repair bool, d *edgelimit.Decision) error {
	o := e.pend
	if cost > 0 {
		o = o.then(b.u.spend(n, cost))
	}
	snap := e.pend
	e.pend = op{}
	e.flight = o
	e.setBusy()
	e.syncing = true
	e.syncedAt = n
	e.spentFlight = Wide{}
	up := b.update(e, o, n, false)
	if repair {
		up.HasCap = true
		up.Cap = e.v.floorOf(&b.u, b.u.limit(n))
	}
	s.stats.Synced++
	s.mu.Unlock()

	t, err := b.kv.Update(ctx, b.prefix+e.key, up)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer b.endSync(e)
	e.flight = op{}
	e.setBusy()
	if err != nil {
		s.stats.Errors++
		e.pend = snap.then(e.pend)
		e.degradedUntil = n + b.sync
		return err
	}
	s.stats.Writes++
	b.learn(e, t)
	// Whether the request fit is the answer's own word: the view may
	// already hold a later state (a write-through that landed after it).
	ans := e.v
	ans.own = t.Own
	fits := cost > 0 && !b.u.limit(n).Less(ans.tat(&b.u))
	fresh := b.withInflight(e, e.tat, n) // the bucket now, this request's reservation undone
	if cost > 0 && !fits {
		u := b.u.undo(cost)
		e.pend = u.then(e.pend)
		fresh = u.apply(fresh)
	}
	if !b.through(e, n) {
		e.granted = true
		e.grantAt = n
		e.grantR = maxWide(b.u.avail(fresh, n), Wide{})
		e.insts = max(1, instances(epochOf(n, b.sync), t.Own.Writers, writersOf(t.Others)))
		// What was spent locally while the sync was in flight counts
		// against the new share.
		e.spent = e.spentFlight
		e.spentFlight = Wide{}
	}
	switch {
	case fits:
		b.u.report(b.u.avail(fresh, n), d)
		d.Allowed = true
		d.Receipt = b.receipt(n, cost, e.hash)
		if e.granted && e.insts > 1 {
			// Remaining counts in the new share as well as in the bucket.
			var sd edgelimit.Decision
			if !b.withinShare(e, n, d.Remaining+1, &sd) && sd.Remaining < d.Remaining {
				d.Remaining, d.Reset = sd.Remaining, sd.Reset
			}
		}
	case report > 0:
		if b.u.decide(b.local(e, n), n, report, d) {
			// The KV's answer is final: a reservation that did not fit, or
			// a write-back that found the bucket as empty as it was.
			d.Allowed = false
			d.RetryAfter = max(d.Reset, time.Nanosecond)
		}
	}
	return nil
}

func writersOf(parts []Part) []Writer {
	var ws []Writer
	for _, p := range parts {
		ws = append(ws, p.Writers...)
	}
	return ws
}

// refund gives cost tokens back at n: locally when e holds a share (the
// next sync writes it), else written at once. s.mu is held on entry and
// released on return.
func (b *Bucket) refund(ctx context.Context, s *shard, e *entry, n, cost int64) error {
	rf := b.u.refund(n, cost)
	if b.shareValid(e, n) || b.degraded(e, n) || e.syncing || e.inflight.Sign() != 0 {
		e.pend = e.pend.then(rf)
		e.spent = e.spent.Add(rf.p)
		if e.syncing {
			e.spentFlight = e.spentFlight.Add(rf.p)
		}
		s.stats.Local++
		s.mu.Unlock()
		return nil
	}
	e.pend = e.pend.then(rf)
	var none edgelimit.Decision
	return b.syncKey(ctx, s, e, n, 0, 0, false, &none)
}

// flush writes back what the KV does not know of victim (marked syncing by
// evict) and drops it from the cache. When the write fails, or requests
// spent from it meanwhile, it stays, dirty, for a later eviction to try
// again: spending is never dropped unwritten.
func (b *Bucket) flush(ctx context.Context, s *shard, victim *entry, n int64) {
	s.mu.Lock()
	o := victim.pend
	victim.pend = op{}
	victim.flight = o
	victim.setBusy()
	up := b.update(victim, o, n, false)
	up.Writer = 0 // a write-back holds no share: it registers nobody
	s.mu.Unlock()
	t, err := b.kv.Update(ctx, b.prefix+victim.key, up)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer b.endSync(victim)
	victim.flight = op{}
	victim.setBusy()
	if err != nil {
		// Counted in Stats.Errors; the entry stays.
		s.stats.Errors++
		victim.pend = o.then(victim.pend)
		return
	}
	s.stats.Writes++
	s.stats.Flushed++
	b.learn(victim, t)
	if !victim.pend.has && victim.inflight.Sign() == 0 {
		// (A write-through in flight must land in this entry: a new one
		// for the key could read the KV before it lands.)
		s.remove(victim)
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
