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
	stats    Stats
	_        [64]byte // keep shards' locks on separate cache lines
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

func newCache(size int) *cache {
	n := 1
	for n < 64 && n*128 <= size {
		n *= 2
	}
	c := &cache{seed: maphash.MakeSeed(), shards: make([]shard, n), mask: uint64(n - 1)}
	per := (size + n - 1) / n
	for i := range c.shards {
		c.shards[i].m = make(map[uint64]*entry)
		c.shards[i].max = max(per, 1)
	}
	return c
}

// shard returns key's shard and hash.
func (c *cache) shard(key string) (*shard, uint64) {
	h := maphash.String(c.seed, key)
	return &c.shards[h&c.mask], h
}

// lookup returns key's entry stamped as used at n, creating it if needed
// and dropping a least recently used one beyond the bound. s.mu is held.
func (s *shard) lookup(key string, h uint64, n int64) *entry {
	e := s.m[h]
	if e != nil && e.key != key || e == nil && len(s.collided) > 0 {
		e = s.collided[key]
	}
	if e != nil {
		e.used = max(e.used, n)
		return e
	}
	if s.len() >= s.max {
		s.evict()
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
	return e
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

// evict drops the least recently used of a few entries (Go's map range
// starts at a random place) that are not syncing. When all of them are
// syncing it drops nothing, so the bound can be exceeded by the syncs in
// flight.
func (s *shard) evict() {
	var victim *entry
	i := 0
	for _, e := range s.m {
		if !e.syncing && (victim == nil || e.used < victim.used) {
			victim = e
		}
		if i++; i == evictSample {
			break
		}
	}
	for _, e := range s.collided {
		if !e.syncing && (victim == nil || e.used < victim.used) {
			victim = e
		}
		break
	}
	if victim != nil {
		s.remove(victim)
	}
}
