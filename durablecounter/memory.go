package durablecounter

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit"
)

// MemoryConfig configures a Memory store. The zero value is ready to use.
type MemoryConfig struct {
	// Shards is the number of independently locked parts of the store,
	// rounded up to a power of two; default 64. One client key always lands
	// in one shard.
	Shards int
	// MaxKeys bounds the live items the store holds (one per key and window
	// in use), split evenly between the shards; default 1,048,576, about
	// 220 MB when full (an item takes 210-230 bytes). A new item beyond it is refused with ErrStoreFull once expired
	// items have been swept: a live count is never evicted, because
	// forgetting it would over-admit.
	MaxKeys int
	// ExpiryMargin is how long an item is kept after the end of its window;
	// default 0. Counters sharing one process share its clock, so the
	// margin for clock skew a dynamostore.Store needs is not needed here.
	ExpiryMargin time.Duration
}

// DefaultMaxKeys is MemoryConfig.MaxKeys's default.
const DefaultMaxKeys = 1 << 20

const (
	defaultMemoryShards = 64
	// minSweep is the shard size below which a shard is never swept.
	minSweep = 64
)

// Memory is an in-process Store: exact, as fast as a map lookup under a
// lock, and with the same semantics as a dynamostore.Store. It is the
// embedded default of `edgelimit serve` and right for a single process;
// instances that must share counts need a dynamostore.Store.
//
// Expired items are treated as absent when read (lazy expiry) and removed
// by a sweep of a shard that runs when the shard has doubled in size since
// its last sweep and some item in it has expired, so a shard holds at most
// about twice its live items, and a sweep costs O(1) amortised per insert.
// A shard's items are a memTable, whose slots hold each item's hash, key
// and entry (state and expiry, 64 bytes) side by side, not pointers to
// them: a decision finds its entry with one cache miss and updates it where
// it found it. The keys hold the client key's bytes inline (memKey), for
// the same reason. A decision allocates nothing (a sliding log's,
// when its millisecond buckets grow, does: the buckets are the one part of
// a state behind a pointer, shared by the entry and the state being
// decided, which the shard's lock keeps consistent).
type Memory struct {
	seed   maphash.Seed
	shards []memShard
	mask   uint64
	margin time.Duration
	perCap int
	key    string
}

type memShard struct {
	mu sync.Mutex
	t  memTable
	// sweepAt is the size at which the next insert sweeps.
	sweepAt int
	// nextExpiry is a lower bound of every entry's expiry (UnixNano): no
	// sweep can remove anything before it.
	nextExpiry int64
	// cap is the shard's share of MaxKeys.
	cap int
	_   [64]byte // keep shards' locks off each other's cache lines
}

type memEntry struct {
	st      state
	expires int64 // UnixNano
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory store. Zero or negative fields of cfg
// take their defaults.
func NewMemory(cfg MemoryConfig) *Memory {
	n := cfg.Shards
	if n <= 0 {
		n = defaultMemoryShards
	}
	n = 1 << bits.Len(uint(n-1)) // round up to a power of two
	maxKeys := cfg.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	s := &Memory{
		seed:   maphash.MakeSeed(),
		shards: make([]memShard, n),
		mask:   uint64(n - 1),
		margin: max(cfg.ExpiryMargin, 0),
		perCap: max(1, (maxKeys+n-1)/n),
	}
	s.key = fmt.Sprintf("durablecounter/memory/%p", s)
	for i := range s.shards {
		s.shards[i].sweepAt = minSweep
		s.shards[i].cap = s.perCap
	}
	return s
}

// Len returns the number of items held, including expired ones not yet
// swept.
func (s *Memory) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.t.n
		sh.mu.Unlock()
	}
	return n
}

func (s *Memory) batchKey() string { return s.key }

// memRef is where an item lives in a Memory: its shard, its hash in the
// shard's table and its key there.
type memRef struct {
	sh  *memShard
	tag uint64
	k   memKey
}

// ref locates id's item. The client key's hash picks the shard (its low
// bits) and, mixed with the rest of id, the item's slot.
func (s *Memory) ref(id *itemID) memRef {
	h := maphash.String(s.seed, id.key)
	return memRef{
		sh:  &s.shards[h&s.mask],
		tag: memTag(h, uint64(id.pid), id.slot, id.shard),
		k:   memKeyOf(id),
	}
}

// shardIndex is the index of the shard that holds the items of key.
func (s *Memory) shardIndex(key string) int {
	return int(maphash.String(s.seed, key) & s.mask)
}

// find returns r's slot, or nil. The shard is locked.
func (r *memRef) find() *memSlot { return r.sh.t.find(r.tag, &r.k) }

// put stores e as r's entry, in slot if find returned it since the last
// insert or sweep. The shard is locked.
func (r *memRef) put(e memEntry, slot *memSlot) {
	r.sh.t.set(r.tag, r.k, e, slot)
	r.sh.nextExpiry = min(r.sh.nextExpiry, e.expires)
}

// live returns r's state: the zero state when absent or expired by t.
func (r *memRef) live(t int64) state {
	if e := r.find(); e != nil && e.e.expires > t {
		return e.e.st
	}
	return state{}
}

func (s *Memory) apply(_ context.Context, o op) (result, error) {
	r := s.ref(&o.id)
	r.sh.mu.Lock()
	defer r.sh.mu.Unlock()
	slot := r.find()
	var st state
	if slot != nil && slot.e.expires > o.t {
		st = slot.e.st // else absent or expired
	}
	if !o.rule.fits(st, o.t, o.cost) {
		return result{known: true, st: o.rule.compact(st, o.t), d: o.rule.decision(st, o.t, o.cost, false)}, nil
	}
	if slot == nil {
		if err := r.sh.makeRoom(o.t); err != nil {
			return result{}, err
		}
	}
	return r.commitOp(&o, slot, st, s.margin), nil
}

// commitOp spends o on its item r (in slot, when find returned it since
// the last insert or sweep), whose current state st admits it, and reports
// the admission.
func (r *memRef) commitOp(o *op, slot *memSlot, st state, margin time.Duration) result {
	te := o.rule.instant(st, o.t)
	st = o.rule.commit(st, o.t, o.cost)
	r.put(memEntry{st: st, expires: o.rule.expiry(st, o.t) + int64(margin)}, slot)
	return admitted(o, st, te)
}

// admitted reports an admission decided at te whose state after it is st
// (owned by the store): the state itself only when nothing is left, for
// the deny cache.
func admitted(o *op, st state, te int64) result {
	r := result{ok: true, known: true, d: o.rule.decision(st, o.t, o.cost, true), rc: o.rule.receipt(st, te, o.cost)}
	if r.d.Remaining == 0 {
		r.st = o.rule.compact(st, o.t)
	}
	return r
}

func (s *Memory) applyAll(_ context.Context, ops []op, res []result) (bool, error) {
	var small [8]int
	idx := small[:0]
	var refsSmall [8]memRef
	refs := refsSmall[:0]
	for i := range ops {
		r := s.ref(&ops[i].id)
		refs = append(refs, r)
		idx = append(idx, s.shardIndex(ops[i].id.key))
	}
	locks := slices.Clone(idx)
	slices.Sort(locks)
	locks = slices.Compact(locks)
	for _, i := range locks { // in index order, so batches never deadlock
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locks {
			s.shards[i].mu.Unlock()
		}
	}()
	all := true
	for i := range ops {
		o, r := &ops[i], &refs[i]
		st := r.live(o.t)
		if !o.rule.fits(st, o.t, o.cost) {
			res[i] = result{known: true, st: o.rule.compact(st, o.t), d: o.rule.decision(st, o.t, o.cost, false)}
			all = false
			continue
		}
		if r.find() == nil {
			if err := r.sh.makeRoom(o.t); err != nil {
				return false, err
			}
		}
		// Fits: reported without the batch, unless it commits.
		res[i] = result{ok: true, known: true, st: o.rule.compact(st, o.t), d: o.rule.decision(st, o.t, o.cost, true)}
	}
	if !all {
		return false, nil
	}
	for i := range ops {
		o, r := &ops[i], &refs[i]
		res[i] = r.commitOp(o, nil, r.live(o.t), s.margin)
	}
	return true, nil
}

func (s *Memory) refund(_ context.Context, o op, rc edgelimit.Receipt) (bool, error) {
	r := s.ref(&o.id)
	r.sh.mu.Lock()
	defer r.sh.mu.Unlock()
	slot := r.find()
	if slot == nil || slot.e.expires <= o.t {
		return false, nil // the item stopped mattering: what it held came back
	}
	st, ok := o.rule.giveBack(slot.e.st, rc, o.t, o.cost)
	if ok {
		slot.e.st = st
	}
	return ok, nil
}

func (s *Memory) charge(_ context.Context, o op) (result, error) {
	r := s.ref(&o.id)
	r.sh.mu.Lock()
	defer r.sh.mu.Unlock()
	if r.find() == nil {
		if err := r.sh.makeRoom(o.t); err != nil {
			return result{}, err
		}
	}
	st := o.rule.commit(r.live(o.t), o.t, o.cost)
	r.put(memEntry{st: st, expires: o.rule.expiry(st, o.t) + int64(s.margin)}, nil)
	return charged(&o, st), nil
}

// charged reports the state st after a charge, as a decision for one more
// unit: allowed while one fits.
func charged(o *op, st state) result {
	fits := o.rule.fits(st, o.t, 1)
	return result{ok: true, known: true, st: o.rule.compact(st, o.t), d: o.rule.decision(st, o.t, 1, fits)}
}

func (s *Memory) grant(_ context.Context, o op, units, end int64) error {
	g, ok := o.rule.(*grantPool)
	if !ok {
		return fmt.Errorf("durablecounter: grant on a %T item", o.rule)
	}
	r := s.ref(&o.id)
	r.sh.mu.Lock()
	defer r.sh.mu.Unlock()
	if r.find() == nil {
		if err := r.sh.makeRoom(o.t); err != nil {
			return err
		}
	}
	st := r.live(o.t)
	switch {
	case units > 0:
		st = g.add(st, units, end, o.t)
	case st.exists && st.at >= end:
		return nil // the marker ends later already
	default:
		st = state{exists: true, at: end}
	}
	r.put(memEntry{st: st, expires: st.at + int64(s.margin)}, nil)
	return nil
}

func (s *Memory) reset(_ context.Context, ops []op) error {
	for i := range ops {
		r := s.ref(&ops[i].id)
		r.sh.mu.Lock()
		r.sh.t.del(r.tag, &r.k)
		r.sh.mu.Unlock()
	}
	return nil
}

func (s *Memory) get(_ context.Context, o op) (state, error) {
	r := s.ref(&o.id)
	r.sh.mu.Lock()
	defer r.sh.mu.Unlock()
	return clone(r.live(o.t)), nil
}

func (s *Memory) read(_ context.Context, ops []op, out []state) error {
	for i := range ops {
		o := &ops[i]
		r := s.ref(&o.id)
		r.sh.mu.Lock()
		out[i] = clone(r.live(o.t))
		r.sh.mu.Unlock()
	}
	return nil
}

// clone returns a copy of s that shares no buckets with it.
func clone(s state) state {
	if s.ext != nil {
		s.ext = &stateExt{buckets: slices.Clone(s.ext.buckets), stale: slices.Clone(s.ext.stale)}
	}
	return s
}

// makeRoom runs before a new entry is added. It sweeps expired entries when
// the shard has doubled since its last sweep (or is full) and something may
// have expired, and refuses the entry in a shard full of live ones.
func (sh *memShard) makeRoom(nowN int64) error {
	if n := sh.t.n; n >= sh.sweepAt || n >= sh.cap {
		if nowN >= sh.nextExpiry {
			sh.nextExpiry = sh.t.sweep(nowN)
		}
		sh.sweepAt = max(minSweep, 2*sh.t.n)
	}
	if sh.t.n >= sh.cap {
		return ErrStoreFull
	}
	return nil
}

var _ edgelimit.InProcess = (*Counter)(nil)

// InProcess reports whether the Counter's state never leaves the process:
// true on a Memory store. The engine then hashes the policy's keys with
// its in-process hash (edgelimit.InProcess); on a shared store (DynamoDB)
// they stay HMAC-SHA256 of the configured secret, as operators compute
// them.
func (c *Counter) InProcess() bool {
	_, ok := c.store.(*Memory)
	return ok
}

// memKey is an item's key in a Memory shard: its itemID without a
// pointer, so that a lookup compares it in the slot it reached instead of
// following pointers to its strings (each a second cache miss for a key
// not decided lately), and a slot holds no pointer to a request's memory
// (edgelimit.Request.Key). The prefix is its number (itemID.pid), the
// client key's bytes are inline (the engine's hashed keys are 22 bytes),
// and a longer key is its SHA-256, truncated to 24 bytes: two distinct
// keys share an item only if they collide in 192 bits of SHA-256.
type memKey struct {
	slot  int64
	pid   uint32
	shard int32
	key   [memShortKey]byte
	n     uint8 // the key's length; memHashedKey for a longer key's digest
}

const (
	memShortKey  = 24
	memHashedKey = 0xff
)

func memKeyOf(id *itemID) memKey {
	k := memKey{pid: id.pid, slot: id.slot, shard: id.shard}
	if len(id.key) <= memShortKey {
		k.n = uint8(copy(k.key[:], id.key))
	} else {
		sum := sha256.Sum256([]byte(id.key))
		copy(k.key[:], sum[:])
		k.n = memHashedKey
	}
	return k
}

// prefixIDs numbers the item prefixes (itemID.prefix) of this process, for
// memKey. They never leave the process, and an algorithm's prefix is
// numbered once, when the algorithm is built: a process numbers as many
// as the distinct policy names, algorithms and override windows its
// Counters were built with.
var prefixIDs struct {
	sync.Mutex
	m map[string]uint32
}

// prefixID returns prefix's number in this process.
func prefixID(prefix string) uint32 {
	prefixIDs.Lock()
	defer prefixIDs.Unlock()
	id, ok := prefixIDs.m[prefix]
	if !ok {
		if prefixIDs.m == nil {
			prefixIDs.m = map[string]uint32{}
		}
		id = uint32(len(prefixIDs.m)) + 1
		prefixIDs.m[prefix] = id
	}
	return id
}
