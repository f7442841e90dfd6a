package durablecounter

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"strings"
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
	// 100 MB. A new item beyond it is refused with ErrStoreFull once expired
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
// The shards' maps hold their entries as values (state and expiry, 64
// bytes, inline in the map's slots), not pointers to them: a decision
// reads its entry where the lookup found it, without a second, dependent
// cache miss, and an admission writes it back (a second probe of the same
// slot, cached by then). Their keys hold the client key's bytes inline
// (memKey), for the same reason. A decision allocates nothing (a sliding log's,
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
	m  map[memKey]memEntry
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
		s.shards[i].m = make(map[memKey]memEntry)
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
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (s *Memory) batchKey() string { return s.key }

func (s *Memory) shardIndex(key string) int {
	if s.mask == 0 {
		return 0
	}
	return int(maphash.String(s.seed, key) & s.mask)
}

func (s *Memory) apply(_ context.Context, o op) (result, error) {
	sh := &s.shards[s.shardIndex(o.id.key)]
	k := memKeyOf(&o.id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, found := sh.m[k]
	var st state
	if found && e.expires > o.t {
		st = e.st // else absent or expired
	}
	if !o.rule.fits(st, o.t, o.cost) {
		return result{known: true, st: o.rule.compact(st, o.t), d: o.rule.decision(st, o.t, o.cost, false)}, nil
	}
	if !found {
		if err := sh.makeRoom(o.t); err != nil {
			return result{}, err
		}
	}
	return sh.commitOp(&o, k, st, s.margin), nil
}

// commitOp spends o on its item (whose key in the shard is k), whose
// current state st admits it, and reports the admission.
func (sh *memShard) commitOp(o *op, k memKey, st state, margin time.Duration) result {
	te := o.rule.instant(st, o.t)
	st = o.rule.commit(st, o.t, o.cost)
	e := memEntry{st: st, expires: o.rule.expiry(st, o.t) + int64(margin)}
	sh.m[k.owned()] = e
	sh.nextExpiry = min(sh.nextExpiry, e.expires)
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
		if !o.rule.fits(st, o.t, o.cost) {
			res[i] = result{known: true, st: o.rule.compact(st, o.t), d: o.rule.decision(st, o.t, o.cost, false)}
			all = false
			continue
		}
		if _, found := sh.m[memKeyOf(&o.id)]; !found {
			if err := sh.makeRoom(o.t); err != nil {
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
		o, sh := &ops[i], &s.shards[idx[i]]
		res[i] = sh.commitOp(o, memKeyOf(&o.id), sh.get(o), s.margin)
	}
	return true, nil
}

func (s *Memory) refund(_ context.Context, o op, rc edgelimit.Receipt) (bool, error) {
	sh := &s.shards[s.shardIndex(o.id.key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := memKeyOf(&o.id)
	e, found := sh.m[k]
	if !found || e.expires <= o.t {
		return false, nil // the item stopped mattering: what it held came back
	}
	st, ok := o.rule.giveBack(e.st, rc, o.t, o.cost)
	if ok {
		e.st = st
		sh.m[k.owned()] = e
	}
	return ok, nil
}

func (s *Memory) charge(_ context.Context, o op) (result, error) {
	sh := &s.shards[s.shardIndex(o.id.key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, found := sh.m[memKeyOf(&o.id)]; !found {
		if err := sh.makeRoom(o.t); err != nil {
			return result{}, err
		}
	}
	st := o.rule.commit(sh.get(&o), o.t, o.cost)
	e := memEntry{st: st, expires: o.rule.expiry(st, o.t) + int64(s.margin)}
	sh.m[memKeyOf(&o.id).owned()] = e
	sh.nextExpiry = min(sh.nextExpiry, e.expires)
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
	sh := &s.shards[s.shardIndex(o.id.key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, found := sh.m[memKeyOf(&o.id)]; !found {
		if err := sh.makeRoom(o.t); err != nil {
			return err
		}
	}
	st := sh.get(&o)
	switch {
	case units > 0:
		st = g.add(st, units, end, o.t)
	case st.exists && st.at >= end:
		return nil // the marker ends later already
	default:
		st = state{exists: true, at: end}
	}
	e := memEntry{st: st, expires: st.at + int64(s.margin)}
	sh.m[memKeyOf(&o.id).owned()] = e
	sh.nextExpiry = min(sh.nextExpiry, e.expires)
	return nil
}

func (s *Memory) reset(_ context.Context, ops []op) error {
	for i := range ops {
		sh := &s.shards[s.shardIndex(ops[i].id.key)]
		sh.mu.Lock()
		delete(sh.m, memKeyOf(&ops[i].id))
		sh.mu.Unlock()
	}
	return nil
}

func (s *Memory) get(_ context.Context, o op) (state, error) {
	sh := &s.shards[s.shardIndex(o.id.key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return clone(sh.get(&o)), nil
}

func (s *Memory) read(_ context.Context, ops []op, out []state) error {
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
	if e, found := sh.m[memKeyOf(&o.id)]; found && e.expires > o.t {
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

// memKey is an item's key in a Memory shard: its itemID with the client
// key's bytes inline (the engine's hashed keys are 22 bytes), so that a
// lookup compares them in the map's slot instead of following a pointer to
// them, a second cache miss for each decision of a key not decided lately;
// and an entry holds no pointer to a request's memory (edgelimit.Request.Key).
// A longer key is kept as a string of its own (owned).
type memKey struct {
	prefix string
	long   string // the key, when longer than short
	slot   int64
	short  [memShortKey]byte
	shard  int32
	n      uint8 // the key's length when inline; memLongKey when long
}

const (
	memShortKey = 24
	memLongKey  = 0xff
)

func memKeyOf(id *itemID) memKey {
	k := memKey{prefix: id.prefix, slot: id.slot, shard: id.shard}
	if len(id.key) <= memShortKey {
		k.n = uint8(copy(k.short[:], id.key))
	} else {
		k.long, k.n = id.key, memLongKey
	}
	return k
}

// owned returns k with a long key copied out of the request's memory, to
// store in a shard.
func (k memKey) owned() memKey {
	if k.long != "" {
		k.long = strings.Clone(k.long)
	}
	return k
}
