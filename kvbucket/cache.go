package kvbucket

import (
	"hash/maphash"
	"sync"
)

// entry is one key's local state in this process (one Lambda instance).
// The fields a cached decision reads and writes come first, so that it
// touches one cache line of the entry.
type entry struct {
	// local is this instance's view of the bucket: a private token bucket,
	// refilled at read time, never above what the last sync merged.
	local State
	// pending counts the nanotokens this instance spent, minus refunds,
	// that the KV does not know of yet.
	pending int64
	// syncedAt is when the last sync was started (Unix nanoseconds).
	syncedAt int64
	// used is when the entry was last used (Unix nanoseconds), for
	// eviction.
	used int64
	// known: local holds a state (a sync has succeeded).
	known bool
	// contended: the last sync found another instance's write. Local
	// decisions then spend only what the sync saw, without refilling, until
	// the next sync.
	contended bool
	// syncing: a sync of this key is in flight in this process.
	syncing bool
	// hasWritten: written is meaningful.
	hasWritten bool
	// nextWrite indexes recent round-robin.
	nextWrite uint8

	key  string
	hash uint64
	// written is the state this instance last wrote to (or adopted from)
	// the KV; reading it back unchanged means nobody else wrote since.
	written State
	// wait is closed when the in-flight first sync of an unknown key ends.
	wait chan struct{}
	// recent are this instance's last writes: when, and the nanotokens of
	// its own spending each carried for the first time. A state another
	// instance stamped before one of them was decided from a read that
	// could not see that write, so it lacks that spending.
	recent [recentWrites]write
}

// recentWrites is how many of its writes an entry remembers.
const recentWrites = 4

// write is one remembered write of an entry.
type write struct {
	at    int64 // State.At of the written state
	delta int64 // own spending it carried first, in nanotokens
}

// remember records a successful write.
func (e *entry) remember(at, delta int64) {
	e.recent[e.nextWrite%recentWrites] = write{at, delta}
	e.nextWrite++
}

// lostSince returns the spending of this entry's writes stamped after at:
// what a state stamped at cannot contain.
func (e *entry) lostSince(at int64) int64 {
	var lost int64
	for _, w := range e.recent {
		if w.at > at {
			lost += w.delta
		}
	}
	return lost
}

// shard is a part of the cache with its own lock. Entries are found by
// the 64-bit hash of their key (computed anyway to pick the shard); the
// rare key whose hash another key already holds lives in collided.
type shard struct {
	mu       sync.Mutex
	m        map[uint64]*entry
	collided map[string]*entry
	max      int
	// p are the bucket's numbers, for telling a dirty entry whose bucket
	// has refilled (nothing left to write back) from one that must be
	// written back before it is dropped.
	p     Params
	stats Stats
	_     [64]byte // keep shards' locks on separate cache lines
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

func newCache(size int, p Params) *cache {
	n := 1
	for n < 64 && n*128 <= size {
		n *= 2
	}
	c := &cache{seed: maphash.MakeSeed(), shards: make([]shard, n), mask: uint64(n - 1)}
	per := (size + n - 1) / n
	for i := range c.shards {
		c.shards[i].m = make(map[uint64]*entry)
		c.shards[i].max = max(per, 1)
		c.shards[i].p = p
	}
	return c
}

// shard returns key's shard and hash.
func (c *cache) shard(key string) (*shard, uint64) {
	h := maphash.String(c.seed, key)
	return &c.shards[h&c.mask], h
}

// find returns key's entry, or nil. s.mu is held.
func (s *shard) find(key string, h uint64) *entry {
	e := s.m[h]
	if e != nil && e.key != key || e == nil && len(s.collided) > 0 {
		e = s.collided[key]
	}
	return e
}

// lookup returns key's entry stamped as used at n, creating it if needed
// and making room for it beyond the bound. Making room may need a write:
// victim, when not nil, is a dirty entry that evict chose and marked
// syncing, which the caller must flush (write back and drop) once s.mu is
// released. s.mu is held.
func (s *shard) lookup(key string, h uint64, n int64) (e, victim *entry) {
	if e = s.find(key, h); e != nil {
		e.used = max(e.used, n)
		return e, nil
	}
	if s.len() >= s.max {
		victim = s.evict(n)
	}
	e = &entry{key: key, hash: h, used: n}
	if s.m[h] == nil {
		s.m[h] = e
	} else {
		if s.collided == nil {
			s.collided = map[string]*entry{}
		}
		s.collided[key] = e
	}
	return e, victim
}

func (s *shard) len() int { return len(s.m) + len(s.collided) }

func (s *shard) remove(e *entry) {
	if s.m[e.hash] == e {
		delete(s.m, e.hash)
	} else {
		delete(s.collided, e.key)
	}
	s.stats.Evicted++
}

// clean reports whether e can be dropped at n without losing anything:
// the KV knows all its spending and refunds, or it holds only unwritten
// spending of an uncontended bucket that has refilled completely since
// (what the KV holds is then full too: dropping the spending changes no
// answer).
func (s *shard) clean(e *entry, n int64) bool {
	return e.pending == 0 ||
		e.pending > 0 && !e.contended && s.p.refill(e.local, n).Tokens >= s.p.Capacity*TokenScale
}

// evict makes room for one entry at n. It samples a few entries that are
// not syncing (Go's map range starts at a random place) and drops the least
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
	i := 0
	look := func(e *entry) bool {
		if !e.syncing {
			if oldest == nil || e.used < oldest.used {
				oldest = e
			}
			if (clean == nil || e.used < clean.used) && s.clean(e, n) {
				clean = e
			}
		}
		i++
		return i == evictSample
	}
	for _, e := range s.m {
		if look(e) {
			break
		}
	}
	if i < evictSample {
		for _, e := range s.collided {
			if look(e) {
				break
			}
		}
	}
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
	oldest.syncedAt = n
	return oldest
}
