package pow

import (
	"sync"
	"time"
)

// DefaultReplayEntries is the size of a ReplayCache made with a
// non-positive size: at about 110 bytes an entry (measured), some 7 MiB at
// most.
const DefaultReplayEntries = 1 << 16

// ID names what a ReplayCache tracks: a challenge's salt, or a signed
// window's token chain.
type ID [SaltSize]byte

// ReplayCache is a per-instance, bounded memory of what was spent. Each ID
// has a watermark, initially 0: Spend(id, from, to) succeeds only when from
// is at least the watermark, and raises it to to. A proof is spent as
// Spend(salt, 0, 1), so it is accepted once; a window token holding count n
// of cost c as Spend(chain, n, n+c), so each count of a chain is spent once,
// in increasing order, and an older token of the chain is refused once a
// newer one was spent here.
//
// An entry is forgotten when it expires (it is then worthless anyway:
// expired challenges and tokens are refused on their own). When the cache is
// full, the entry closest to its expiry is forgotten early: that reopens one
// ID to replay on this instance, instead of refusing honest clients. Memory
// is bounded by the maximum number of entries. It is safe for concurrent use.
type ReplayCache struct {
	mu      sync.Mutex
	max     int
	entries map[ID]replayEntry
	byExp   expHeap
	evicted uint64
}

type replayEntry struct {
	mark int64 // watermark
	exp  int64 // unix nanoseconds
}

// NewReplayCache returns a cache of at most maxEntries entries
// (DefaultReplayEntries when maxEntries <= 0).
func NewReplayCache(maxEntries int) *ReplayCache {
	if maxEntries <= 0 {
		maxEntries = DefaultReplayEntries
	}
	return &ReplayCache{max: maxEntries, entries: make(map[ID]replayEntry)}
}

// Spend records that the span [from, to) of id was used, if from is at least
// the id's watermark, and reports whether it was. The entry is kept until
// expires (or later, if an earlier Spend asked for longer). to must be
// greater than from.
func (c *ReplayCache) Spend(id ID, from, to int64, expires, now time.Time) bool {
	if to <= from || from < 0 {
		return false
	}
	exp, t := expires.UnixNano(), now.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(t)
	e, ok := c.entries[id]
	if ok && e.exp <= t {
		ok = false // expired, not yet swept
		e = replayEntry{}
	}
	if ok && from < e.mark {
		return false
	}
	if !ok && len(c.entries) >= c.max {
		c.evictOne()
	}
	e.mark = to
	if exp > e.exp {
		e.exp = exp
		c.byExp.push(expItem{exp: exp, id: id})
	}
	c.entries[id] = e
	if len(c.byExp) > 2*c.max+64 {
		c.rebuild()
	}
	return true
}

// Spendable reports whether Spend(id, from, to, ...) would succeed now,
// without recording anything: a peek.
func (c *ReplayCache) Spendable(id ID, from int64, now time.Time) bool {
	if from < 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	return !ok || e.exp <= now.UnixNano() || from >= e.mark
}

// Unspend undoes Spend(id, from, to) if nothing was spent after it, so that
// a request refused by another policy does not burn the client's token or
// proof. It reports whether it did.
func (c *ReplayCache) Unspend(id ID, from, to int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok || e.mark != to || from >= to {
		return false
	}
	if from <= 0 {
		delete(c.entries, id) // its heap item goes stale and is skipped
		return true
	}
	e.mark = from
	c.entries[id] = e
	return true
}

// Len returns the number of entries, including expired ones not yet swept.
func (c *ReplayCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Evicted returns how many unexpired entries were forgotten because the
// cache was full: each reopened one ID to replay on this instance.
func (c *ReplayCache) Evicted() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.evicted
}

// expire drops the entries that expired at or before t.
func (c *ReplayCache) expire(t int64) {
	for len(c.byExp) > 0 && c.byExp[0].exp <= t {
		it := c.byExp.pop()
		if e, ok := c.entries[it.id]; ok && e.exp == it.exp {
			delete(c.entries, it.id)
		}
	}
}

// evictOne drops the live entry that expires first.
func (c *ReplayCache) evictOne() {
	for len(c.byExp) > 0 {
		it := c.byExp.pop()
		if e, ok := c.entries[it.id]; ok && e.exp == it.exp {
			delete(c.entries, it.id)
			c.evicted++
			return
		}
	}
}

// rebuild drops the stale heap items left by extended or undone entries.
func (c *ReplayCache) rebuild() {
	c.byExp = c.byExp[:0]
	for id, e := range c.entries {
		c.byExp = append(c.byExp, expItem{exp: e.exp, id: id})
	}
	for i := len(c.byExp)/2 - 1; i >= 0; i-- {
		c.byExp.down(i)
	}
}

type expItem struct {
	exp int64
	id  ID
}

// expHeap is a min-heap of expiries (hand-rolled: container/heap would box
// every item).
type expHeap []expItem

func (h *expHeap) push(it expItem) {
	*h = append(*h, it)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].exp <= s[i].exp {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *expHeap) pop() expItem {
	s := *h
	it := s[0]
	n := len(s) - 1
	s[0] = s[n]
	*h = s[:n]
	h.down(0)
	return it
}

func (h expHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].exp < h[l].exp {
			m = r
		}
		if h[i].exp <= h[m].exp {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
