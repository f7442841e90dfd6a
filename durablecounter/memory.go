package durablecounter

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit"
)

// MemoryConfig configures a MemoryStore. The zero value is ready to use.
type MemoryConfig struct {
	// Shards is the number of independently locked parts of the store,
	// rounded up to a power of two; default 64. One client key always lands
	// in one shard.
	Shards int
	// MaxKeys bounds the live items the store holds (one per key and window
	// in use), split evenly between the shards; default 1,048,576, about
	// 100 MB. A new item beyond it is refused with ErrStoreFull once expired
	// items have been swept: a live count is never evicted, because
	// forgetting it would over-admit.
	MaxKeys int
	// ExpiryMargin is how long an item is kept after the end of its window;
	// default 0. Counters sharing one process share its clock, so the
	// margin for clock skew a DynamoStore needs is not needed here.
	ExpiryMargin time.Duration
}

// DefaultMaxKeys is MemoryConfig.MaxKeys's default.
const DefaultMaxKeys = 1 << 20

const (
	defaultMemoryShards = 64
	// minSweep is the shard size below which a shard is never swept.
	minSweep = 64
)

// MemoryStore is an in-process Store: exact, as fast as a map lookup under
// a lock, and with the same semantics as a DynamoStore. It is the embedded
// default of `edgelimit serve` and right for a single process; instances
// that must share counts need a DynamoStore.
//
// Expired items are treated as absent when read (lazy expiry) and removed
// by a sweep of a shard that runs when the shard has doubled in size since
// its last sweep and some item in it has expired, so a shard holds at most
// about twice its live items, and a sweep costs O(1) amortised per insert.
// A decision on an existing item is one map lookup under the shard's lock
// and allocates nothing (a sliding log's allocates when its buckets grow);
// a new item allocates its 56-byte entry.
type MemoryStore struct {
	seed   maphash.Seed
	shards []memShard
	mask   uint64
	margin time.Duration
	perCap int
	key    string
}

type memShard struct {
	mu sync.Mutex
	m  map[itemID]*memEntry
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

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore. Zero or negative fields of
// cfg take their defaults.
func NewMemoryStore(cfg MemoryConfig) *MemoryStore {
	n := cfg.Shards
	if n <= 0 {
		n = defaultMemoryShards
	}
	n = 1 << bits.Len(uint(n-1)) // round up to a power of two
	maxKeys := cfg.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	s := &MemoryStore{
		seed:   maphash.MakeSeed(),
		shards: make([]memShard, n),
		mask:   uint64(n - 1),
		margin: max(cfg.ExpiryMargin, 0),
		perCap: max(1, (maxKeys+n-1)/n),
	}
	s.key = fmt.Sprintf("durablecounter/memory/%p", s)
	for i := range s.shards {
		s.shards[i].m = make(map[itemID]*memEntry)
		s.shards[i].sweepAt = minSweep
		s.shards[i].cap = s.perCap
	}
	return s
}

// Len returns the number of items held, including expired ones not yet
// swept.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (s *MemoryStore) batchKey() string { return s.key }

func (s *MemoryStore) shardIndex(key string) int {
	if s.mask == 0 {
		return 0
	}
	return int(maphash.String(s.seed, key) & s.mask)
}

func (s *MemoryStore) apply(_ context.Context, o op) (result, error) {
	sh := &s.shards[s.shardIndex(o.id.key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// check and commit in one: a single map lookup.
	e := sh.m[o.id]
	var st state
	if e != nil && e.expires > o.t {
		st = e.st // else absent or expired
	}
	if !o.alg.fits(st, o.t, o.cost) {
		return result{known: true, st: o.alg.compact(st, o.t), d: o.alg.decision(st, o.t, o.cost, false)}, nil
	}
	if e == nil {
		if err := sh.makeRoom(o.t); err != nil {
			return result{}, err
		}
	}
	return sh.commitOp(&o, e, st, s.margin), nil
}

// commitOp spends o on the item's entry e (created when nil), whose current
// state st admits it, and reports the admission.
func (sh *memShard) commitOp(o *op, e *memEntry, st state, margin time.Duration) result {
	if e == nil {
		e = new(memEntry)
		sh.m[o.id] = e
	}
	te := o.alg.instant(st, o.t)
	st = o.alg.commit(st, o.t, o.cost)
	e.st = st
	e.expires = o.alg.expiry(st, o.t) + int64(margin)
	sh.nextExpiry = min(sh.nextExpiry, e.expires)
	return admitted(o, st, te)
}

// admitted reports an admission decided at te whose state after it is st
// (owned by the store): the state itself only when nothing is left, for
// the deny cache.
func admitted(o *op, st state, te int64) result {
	r := result{ok: true, known: true, d: o.alg.decision(st, o.t, o.cost, true), rc: o.alg.receipt(st, te, o.cost)}
	if r.d.Remaining == 0 {
		r.st = o.alg.compact(st, o.t)
	}
	return r
}

func (s *MemoryStore) applyAll(_ context.Context, ops []op, res []result) (bool, error) {
	var small [8]int
	idx := small[:0]
	for i := range ops {
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
		o, sh := &ops[i], &s.shards[idx[i]]
		st := sh.get(o)
		if !o.alg.fits(st, o.t, o.cost) {
			res[i] = result{known: true, st: o.alg.compact(st, o.t), d: o.alg.decision(st, o.t, o.cost, false)}
			all = false
			continue
		}
		if sh.m[o.id] == nil {
			if err := sh.makeRoom(o.t); err != nil {
				return false, err
			}
		}
		// Fits: reported without the batch, unless it commits.
		res[i] = result{ok: true, known: true, st: o.alg.compact(st, o.t), d: o.alg.decision(st, o.t, o.cost, true)}
	}
	if !all {
		return false, nil
	}
	for i := range ops {
		o, sh := &ops[i], &s.shards[idx[i]]
		res[i] = sh.commitOp(o, sh.m[o.id], sh.get(o), s.margin)
	}
	return true, nil
}

func (s *MemoryStore) refund(_ context.Context, o op, rc edgelimit.Receipt) (bool, error) {
	sh := &s.shards[s.shardIndex(o.id.key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[o.id]
	if e == nil || e.expires <= o.t {
		return false, nil // the item stopped mattering: what it held came back
	}
	st, ok := o.alg.giveBack(e.st, rc, o.t, o.cost)
	e.st = st
	return ok, nil
}

func (s *MemoryStore) get(_ context.Context, o op) (state, error) {
	sh := &s.shards[s.shardIndex(o.id.key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return clone(sh.get(&o)), nil
}

func (s *MemoryStore) read(_ context.Context, ops []op, out []state) error {
	for i := range ops {
		o := &ops[i]
		sh := &s.shards[s.shardIndex(o.id.key)]
		sh.mu.Lock()
		out[i] = clone(sh.get(o))
		sh.mu.Unlock()
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

// get returns the live state of o's item. The shard is locked.
func (sh *memShard) get(o *op) state {
	if e := sh.m[o.id]; e != nil && e.expires > o.t {
		return e.st
	}
	return state{}
}

// makeRoom runs before a new entry is added. It sweeps expired entries when
// the shard has doubled since its last sweep (or is full) and something may
// have expired, and refuses the entry in a shard full of live ones.
func (sh *memShard) makeRoom(nowN int64) error {
	if n := len(sh.m); n >= sh.sweepAt || n >= sh.cap {
		if nowN >= sh.nextExpiry {
			sh.sweep(nowN)
		}
		sh.sweepAt = max(minSweep, 2*len(sh.m))
	}
	if len(sh.m) >= sh.cap {
		return ErrStoreFull
	}
	return nil
}

func (sh *memShard) sweep(nowN int64) {
	next := int64(1<<63 - 1)
	for id, e := range sh.m {
		if e.expires <= nowN {
			delete(sh.m, id)
			continue
		}
		next = min(next, e.expires)
	}
	sh.nextExpiry = next
}
