package durablecounter

import (
	"hash/maphash"
	"strings"
	"sync"
)

// stateCache is a bounded, sharded map from items to states with an
// expiry, for the deny cache of a Counter and the views of the remote store.
// It holds hints, never truth: a lost or evicted entry costs a store call,
// nothing else.
type stateCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
	// perShard bounds each shard's weight (entries, plus one per sliding
	// log bucket they hold).
	perShard int
}

const cacheShards = 16

type cacheShard struct {
	mu     sync.Mutex
	m      map[itemID]cacheEntry
	weight int
	_      [40]byte
}

type cacheEntry struct {
	st state
	// until is when the entry stops being useful (Unix nanoseconds).
	until int64
}

func newStateCache(maxWeight int) *stateCache {
	c := &stateCache{seed: maphash.MakeSeed(), perShard: max(1, maxWeight/cacheShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[itemID]cacheEntry)
	}
	return c
}

func weightOf(s *state) int {
	if s.ext == nil {
		return 1
	}
	return 1 + len(s.ext.buckets) + len(s.ext.stale)
}

func (c *stateCache) shard(id *itemID) *cacheShard {
	return &c.shards[maphash.String(c.seed, id.key)%cacheShards]
}

// get returns the entry of id if it is still useful at now.
func (c *stateCache) get(id itemID, now int64) (state, bool) {
	sh := c.shard(&id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[id]
	if !ok {
		return state{}, false
	}
	if e.until <= now {
		sh.weight -= weightOf(&e.st)
		delete(sh.m, id)
		return state{}, false
	}
	return e.st, true
}

// lookup is get for the deny cache's refresh: an entry past its until is
// kept and reported as expired, so that the requests arriving while one of
// them asks the store can wait for that answer instead of all asking at
// once (see flights).
func (c *stateCache) lookup(id itemID, now int64) (st state, ok, expired bool) {
	sh := c.shard(&id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[id]
	if !ok {
		return state{}, false, false
	}
	if e.until <= now {
		return state{}, false, true
	}
	return e.st, true, false
}

// put stores st for id until until, making room by dropping entries that
// are no longer useful and, if that is not enough, arbitrary ones.
func (c *stateCache) put(id itemID, st state, now, until int64) {
	if until <= now {
		return
	}
	w := weightOf(&st)
	if w > c.perShard {
		return
	}
	sh := c.shard(&id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.m[id]; ok {
		sh.weight -= weightOf(&old.st)
		delete(sh.m, id)
	}
	id.key = strings.Clone(id.key) // not the request's memory (edgelimit.Request.Key)
	// Full: evict from a sample of entries (map iteration starts at a
	// random place), preferring those no longer useful, so that a put costs
	// O(1) however large the cache.
	for sh.weight+w > c.perShard {
		var victim itemID
		var victimEntry cacheEntry
		found := false
		seen := 0
		for k, e := range sh.m {
			if !found || e.until < victimEntry.until {
				victim, victimEntry, found = k, e, true
			}
			if seen++; seen == 8 || e.until <= now {
				break
			}
		}
		if !found {
			break
		}
		sh.weight -= weightOf(&victimEntry.st)
		delete(sh.m, victim)
	}
	sh.m[id] = cacheEntry{st: st, until: until}
	sh.weight += w
}

func (c *stateCache) del(id itemID) {
	sh := c.shard(&id)
	sh.mu.Lock()
	if old, ok := sh.m[id]; ok {
		sh.weight -= weightOf(&old.st)
		delete(sh.m, id)
	}
	id.key = strings.Clone(id.key) // not the request's memory (edgelimit.Request.Key)
	sh.mu.Unlock()
}

// len returns the number of entries, for tests.
func (c *stateCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// flights lets one request per item ask the store when its deny-cache
// entry has expired, while the others wait for that answer and look at the
// cache again. Without it, every request of a flooding client in flight at
// the moment an entry expires goes to the store (a gcra policy at 10/s
// expires its entry ten times a second).
type flights struct {
	mu sync.Mutex
	m  map[itemID]chan struct{}
}

// join returns the channel closed when the leader's store call ends, and
// whether the caller is the leader (then it must call done).
func (f *flights) join(id itemID) (wait chan struct{}, leader bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[itemID]chan struct{})
	}
	if ch, ok := f.m[id]; ok {
		return ch, false
	}
	ch := make(chan struct{})
	f.m[id] = ch
	return ch, true
}

func (f *flights) done(id itemID, ch chan struct{}) {
	f.mu.Lock()
	delete(f.m, id)
	f.mu.Unlock()
	close(ch)
}
