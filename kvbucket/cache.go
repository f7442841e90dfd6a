package kvbucket

import (
	"hash/maphash"
	"sync"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"
)

// entry is one key's local state in this process (one Lambda instance).
// The fields a decision from the cache reads and writes, allowed or denied,
// come first and together, in its first three cache lines (192 bytes: the
// key a lookup compares in the first); the entry is 448 bytes, a size
// class of seven cache lines, so that every entry starts on a cache line
// and those three are never four (TestEntryLayout). The pointers come
// next, together (the garbage collector reads an entry's pointer words
// only, which then share two cache lines instead of lying across the
// entry), then the state of KV calls in flight and the rest, which a
// decision from the cache does not read.
type entry struct {
	// short is the key, inline when it is at most as long (the engine's
	// hashed keys are 22 bytes; shortLen is its length, or longKey): a
	// lookup compares it in the entry it reached, without a second cache
	// miss on the key's own bytes.
	short    [shortKey]byte
	shortLen uint8
	// known: a store answer came (v holds it).
	known bool
	// granted: a share was granted after probation.
	granted bool
	// syncing: a periodic sync (or the first read, or a write-back) of the
	// key is in flight in this process.
	syncing bool
	// busy: flight or inflight is not empty (what is in flight counts in
	// the local state).
	busy bool
	// refreshing: the read of a stale denial is in flight.
	refreshing bool
	// idleSeen: the idle write-back saw the key with unwritten changes at
	// its last pass, and used has not moved since (idle.go): the next pass
	// writes it back. Moving used clears it.
	idleSeen bool
	// hasOwn is v.own.Has, and ownTAT this region's term of the bucket's
	// TAT, v.own.TAT + W·v.so: copies of the view's, read on the hot path
	// of a denial (Bucket.insane).
	hasOwn bool
	// used is when the entry was last used (Unix nanoseconds), for
	// eviction.
	used int64
	// tat is the bucket's TAT as last learned from the KV (v.tat),
	// without this instance's unwritten changes.
	tat wire.Wide
	// pend are this instance's changes the KV does not know yet: local
	// spending, refunds, an undone reservation.
	pend op
	// spent counts the units this instance spent locally since its share
	// was granted (refunds subtract).
	spent wire.Wide
	// firstAt is when the first store answer for the key came (probation
	// ends a sync interval later); grantAt the instant of the share's grant;
	// degradedUntil, after a failed store call, when the key may call the
	// store again.
	firstAt, grantAt, degradedUntil int64
	// grantEnd is when the operator's grant e knows of ends (0: none, or
	// none left): a copy of v's, read on the hot path.
	grantEnd int64
	// insts are the instances counted at the grant (1: this one alone,
	// which then decides from the whole bucket).
	insts int64
	// learnedAt is when the KV last answered for the key (a local denial
	// older than a sync interval is read again: an operator's Reset or
	// Grant elsewhere reaches this instance within one).
	learnedAt int64
	ownTAT    wire.Wide // see hasOwn
	// hash is the key's (the cache's maphash); with the Bucket's id it
	// names the Bucket and the key in a receipt (Bucket.receiptID).
	hash uint64

	// long is the key's KV key (the Bucket's prefix and the key) when the
	// key is longer than short holds; else nil: the KV key is then made
	// for each KV call (Bucket.kvKey), so that a cached key is no second
	// object for the garbage collector to mark. Set when the entry is
	// made, never changed. (A pointer, not a string, to keep the entry
	// within its size class: keys arrive hashed, 22 bytes, so a long one
	// is rare.)
	long *string
	// wait is closed when the in-flight first read of an unknown key ends;
	// writing when the write-through in flight ends.
	wait, writing chan struct{}
	// v is the shared state as last learned (its pointers first).
	v view

	// flight are the changes a sync or a write-back in flight is writing
	// (they count until its answer comes).
	flight op
	// inflight are the units reserved by the write-through in flight.
	inflight wire.Wide
	// spentFlight are the units spent locally while the sync that grants
	// the next share is in flight; grantTAT the bucket's TAT at the grant:
	// with R what it held then (at least 0, under the limits of the
	// request asking), the share at n is (R + (n − grantAt)·Limit) / insts.
	spentFlight, grantTAT wire.Wide
}

const (
	shortKey = 24
	longKey  = 0xff
)

// is reports whether e is key's entry, whose prefix (the Bucket's) is
// prefixLen bytes long.
func (e *entry) is(key string, prefixLen int) bool {
	if e.shortLen != longKey {
		return int(e.shortLen) == len(key) && string(e.short[:len(key)]) == key
	}
	return (*e.long)[prefixLen:] == key
}

// kvKey returns e's KV key: the Bucket's prefix and the key.
func (b *Bucket) kvKey(e *entry) string {
	if e.shortLen != longKey {
		return b.prefix + string(e.short[:e.shortLen])
	}
	return *e.long
}

// setBusy keeps busy in step with flight and inflight. s.mu is held.
func (e *entry) setBusy() { e.busy = e.flight.has || e.inflight.Sign() != 0 }

// reserving reports whether write-throughs of e are in flight: only a busy
// entry's are, so that an entry not busy answers from its hot fields,
// without reading inflight (a cache line of its own). s.mu is held.
func (e *entry) reserving() bool { return e.busy && e.inflight.Sign() != 0 }

// shard is a part of the cache with its own lock. Entries are found by
// the 64-bit hash of their key (computed anyway to pick the shard) in an
// open-addressing table (entryTable); keys whose hashes are equal are
// told apart by the key each entry holds.
type shard struct {
	mu  sync.Mutex
	t   entryTable
	max int
	// u are the bucket's numbers, for telling a dirty entry whose bucket
	// has refilled (nothing left to write back) from one that must be
	// written back before it is dropped.
	u     *units
	stats Stats
	// prefix is the Bucket's KV key prefix (entry.long).
	prefix string
	_      [64]byte // keep shards' locks on separate cache lines
}

// cache is the bounded in-process state, sharded by key hash.
type cache struct {
	seed   maphash.Seed
	shards []shard
	mask   uint64
}

// evictSample is how many entries an eviction compares: the least recently
// used of them goes (sampled LRU, as Redis does), so a hit only stamps its
// own entry instead of relinking a list.
const evictSample = 8

func newCache(size int, u *units, prefix string) *cache {
	n := 1
	for n < 64 && n*128 <= size {
		n *= 2
	}
	c := &cache{seed: maphash.MakeSeed(), shards: make([]shard, n), mask: uint64(n - 1)}
	per := (size + n - 1) / n
	for i := range c.shards {
		c.shards[i].max = max(per, 1)
		c.shards[i].t.fit = fitFor(c.shards[i].max)
		c.shards[i].u = u
		c.shards[i].prefix = prefix
	}
	return c
}

// shard returns key's shard and hash.
func (c *cache) shard(key string) (*shard, uint64) {
	h := maphash.String(c.seed, key)
	return &c.shards[h&c.mask], h
}

// find returns key's entry, or nil. s.mu is held.
func (s *shard) find(key string, h uint64) *entry { return s.t.find(key, h, len(s.prefix)) }

// lookup returns key's entry stamped as used at n, creating it if needed
// and making room for it beyond the bound. Making room may need a write:
// victim, when not nil, is a dirty entry that evict chose and marked
// syncing, which the caller must flush (write back and drop) once s.mu is
// released. s.mu is held.
func (s *shard) lookup(key string, h uint64, n int64) (e, victim *entry) {
	if e = s.find(key, h); e != nil {
		if n > e.used {
			e.used, e.idleSeen = n, false
		}
		return e, nil
	}
	if s.len() >= s.max {
		victim = s.evict(n)
	}
	e = &entry{hash: h, used: n}
	if len(key) <= shortKey {
		e.shortLen = uint8(copy(e.short[:], key))
	} else {
		// A copy, which is also the key's KV key, made once: the request's
		// key lies in memory the engine allocated for the whole request,
		// which the entry would keep alive.
		long := s.prefix + key
		e.shortLen, e.long = longKey, &long
	}
	s.t.insert(e)
	return e, victim
}

func (s *shard) len() int { return s.t.n }

// remove drops e from the cache. s.mu is held.
func (s *shard) remove(e *entry) {
	if s.t.remove(e) {
		s.stats.Evicted++
	}
}

// clean reports whether e can be dropped at n without losing anything:
// the KV knows all its changes, or the bucket has refilled completely with
// and without them (what they would change is then nothing).
func (s *shard) clean(e *entry, n int64) bool {
	if !e.pend.has && !e.flight.has {
		return true
	}
	nl := s.u.at(n)
	return !nl.Less(e.tat) && !nl.Less(e.pend.apply(e.flight.apply(e.tat)))
}

// evict makes room for one entry at n. It samples a few entries that are
// not syncing (the ones from a random slot of the table on) and drops the least
// recently used clean one: that loses nothing, since a dropped key is read
// back from the KV, strongly consistent. When the least recently used of
// the sample is dirty (the KV lacks some of its spending) it is returned,
// marked syncing, for the caller to write back and then drop (see
// Bucket.flush): eviction never forgets spending, and a dirty entry does
// not outstay its turn. (Dropping a clean one as well keeps the bound
// while a write-back is in flight or has failed.) The bound can be
// exceeded by the syncs and write-backs in flight, and by dirty entries
// whose write-back failed when the sample held no clean one.
func (s *shard) evict(n int64) *entry {
	var clean, oldest *entry
	s.t.sample(evictSample, func(e *entry) bool {
		if !e.syncing && !e.reserving() {
			if oldest == nil || e.used < oldest.used {
				oldest = e
			}
			if (clean == nil || e.used < clean.used) && s.clean(e, n) {
				clean = e
			}
		}
		return true
	})
	if clean != nil {
		s.remove(clean)
	}
	if oldest == nil || oldest == clean {
		return nil
	}
	if s.clean(oldest, n) {
		return nil
	}
	oldest.syncing = true
	return oldest
}
