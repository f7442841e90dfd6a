package durablecounter

import (
	"context"
	"errors"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// stateCache is a bounded, sharded map from items to states with an
// expiry, for the deny cache of a Counter and the views of the DynamoDB store.
// It holds hints, never truth: a lost or evicted entry costs a store call,
// nothing else.
//
// A state read from the store may be out of date by the time it is put:
// this instance may have refunded, reset or spent on the item while the
// read was on its way. Such a put must not outlive the change, so a write
// that makes entries of an item wrong invalidates it once it has landed
// (invalidate), and a caller that reads the store to fill the cache takes
// the item's generation before the read (since) and puts with it
// (putSince): a put whose item was invalidated in between is dropped.
type stateCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
	// perShard bounds each shard's weight (entries, plus one per sliding
	// log bucket they hold).
	perShard int
	// gens counts the invalidations of the items hashing to each stripe
	// (by key: items of one key share one). A stripe shared by two keys
	// only drops a put now and then; it never keeps a stale one.
	gens [genStripes]atomic.Uint64
}

const (
	cacheShards = 16
	genStripes  = 1024
)

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

func (c *stateCache) gen(id *itemID) *atomic.Uint64 {
	return &c.gens[maphash.String(c.seed, id.key)/cacheShards%genStripes]
}

// since returns id's generation, to take before a store call whose answer
// will be put with putSince.
func (c *stateCache) since(id itemID) uint64 { return c.gen(&id).Load() }

// putSince is put, unless id was invalidated after since returned gen: the
// state was read before a change this instance made, and would hide it.
func (c *stateCache) putSince(id itemID, st state, now, until int64, gen uint64) {
	c.put1(id, st, now, until, c.gen(&id), gen)
}

// invalidate drops id's entry and any put of a state read before now: to
// call once a write that changes the item in a way its entries must show
// has landed. (The generation moves before the entry is dropped under
// the shard's lock, and putSince checks it under that lock: a put either
// sees the new generation or is dropped after it.)
func (c *stateCache) invalidate(id itemID) {
	c.gen(&id).Add(1)
	c.del(id)
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
	c.put1(id, st, now, until, nil, 0)
}

// put1 is put, and with gen set, putSince.
func (c *stateCache) put1(id itemID, st state, now, until int64, gen *atomic.Uint64, since uint64) {
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
	if gen != nil && gen.Load() != since {
		return // invalidated since the state was read
	}
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
	if c == nil {
		return 0
	}
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
	m  map[itemID]*flight
}

// flight is one leader's store call: done is closed when it ends, and err
// is then its failure, if the store failed it (not the leader's client
// going away), which the requests that waited share.
type flight struct {
	done chan struct{}
	err  error
}

// join returns the leader's flight, and whether the caller is the leader
// (then it must call land).
func (f *flights) join(id itemID) (fl *flight, leader bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[itemID]*flight)
	}
	if fl, ok := f.m[id]; ok {
		return fl, false
	}
	fl = &flight{done: make(chan struct{})}
	f.m[id] = fl
	return fl, true
}

// land ends the leader's flight; err is its store call's error, or nil.
func (f *flights) land(id itemID, fl *flight, err error) {
	f.mu.Lock()
	delete(f.m, id)
	f.mu.Unlock()
	if err != nil && !errors.Is(err, context.Canceled) {
		fl.err = err
	}
	close(fl.done)
}
