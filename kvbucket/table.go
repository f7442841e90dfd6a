package kvbucket

import (
	"math/bits"
	"math/rand/v2"
)

// entryTable is a shard's entries: an open-addressing hash table with
// linear probing whose 16-byte slots hold a key's hash and its entry. Go's
// map keeps a group's control bytes apart from its slots, so finding a key
// not used lately cost two cache misses before the entry's own (the
// control word, then the slot); here a lookup reads the slot where the
// hash points (four to a cache line) and then the entry, whose key it
// compares. Keys whose hashes are equal are different slots of one probe
// run, told apart by the key in the entry. The table grows by doubling
// above 3/4 full, but to no more than fit slots while fit is more (the
// size that holds the shard's bound of entries under 3/4 full: a full
// shard's table is then 1/2 to 3/4 full rather than 3/8 to 3/4), and
// never shrinks (as a Go map); deletion shifts the slots after a hole
// back, so no tombstones build up.
//
// The shard's lock guards it. An entry's address is stable (the table
// moves slots, never entries).
type entryTable struct {
	slots []tableSlot
	n     int // entries held
	fit   int // see entryTable; 0: no bound
}

// fitFor returns the table size that holds max entries under 3/4 full.
func fitFor(max int) int { return (max+1)*4/3 + 1 }

// tableSlot is one key's place: its hash and its entry (nil: empty).
type tableSlot struct {
	h uint64
	e *entry
}

// tableMin is a table's first size, in slots.
const tableMin = 16

// home is the slot where h's probe starts. The shard was chosen by h's low
// bits; the multiply by an odd constant spreads every bit of h to the top
// ones, which pick the place in a table of any size.
func (t *entryTable) home(h uint64) int {
	hi, _ := bits.Mul64(h*0x9e3779b97f4a7c15, uint64(len(t.slots)))
	return int(hi)
}

// next is the slot after i, the first after the last.
func (t *entryTable) next(i int) int {
	if i++; i == len(t.slots) {
		return 0
	}
	return i
}

// find returns key's entry (hash h; its KV key has a prefix of prefixLen
// bytes), or nil.
func (t *entryTable) find(key string, h uint64, prefixLen int) *entry {
	if t.n == 0 {
		return nil
	}
	for i := t.home(h); ; i = t.next(i) {
		s := &t.slots[i]
		if s.e == nil {
			return nil
		}
		if s.h == h && s.e.is(key, prefixLen) {
			return s.e
		}
	}
}

// insert adds e, whose key the table does not hold.
func (t *entryTable) insert(e *entry) {
	if (t.n+1)*4 > len(t.slots)*3 {
		size := max(tableMin, 2*len(t.slots))
		if t.fit > len(t.slots) {
			size = min(size, max(t.fit, tableMin))
		}
		t.resize(size)
	}
	t.place(tableSlot{h: e.hash, e: e})
	t.n++
}

// place puts s in the first empty slot from its home on.
func (t *entryTable) place(s tableSlot) {
	i := t.home(s.h)
	for t.slots[i].e != nil {
		i = t.next(i)
	}
	t.slots[i] = s
}

// resize moves every entry to a table of size slots.
func (t *entryTable) resize(size int) {
	old := t.slots
	t.slots = make([]tableSlot, size)
	for _, s := range old {
		if s.e != nil {
			t.place(s)
		}
	}
}

// remove drops e, if held, shifting the slots after it back so that every
// entry stays reachable from its home. It reports whether e was held.
func (t *entryTable) remove(e *entry) bool {
	if t.n == 0 {
		return false
	}
	hole := t.home(e.hash)
	for t.slots[hole].e != e {
		if t.slots[hole].e == nil {
			return false
		}
		hole = t.next(hole)
	}
	size := len(t.slots)
	dist := func(from, to int) int { // cyclically
		if to >= from {
			return to - from
		}
		return to + size - from
	}
	for j := t.next(hole); t.slots[j].e != nil; j = t.next(j) {
		// The entry at j may fill the hole if the hole lies on its probe
		// path: between its home and j, cyclically.
		if dist(t.home(t.slots[j].h), j) >= dist(hole, j) {
			t.slots[hole] = t.slots[j]
			hole = j
		}
	}
	t.slots[hole] = tableSlot{}
	t.n--
	return true
}

// sample calls f with up to k entries from a random place of the table on
// (slots in order, wrapping around), until f returns false: the sample of
// a sampled-LRU eviction. Entries' places follow their hashes, not their
// use, so neighbours are as good a sample as any (Go's map iteration, which
// this replaced, also walks on from a random start).
func (t *entryTable) sample(k int, f func(*entry) bool) {
	if t.n == 0 {
		return
	}
	i := rand.IntN(len(t.slots))
	for seen, looked := 0, 0; seen < k && looked < len(t.slots); looked++ {
		if e := t.slots[i].e; e != nil {
			seen++
			if !f(e) {
				return
			}
		}
		i = t.next(i)
	}
}

// each calls f with every entry. f must not change the table.
func (t *entryTable) each(f func(*entry)) {
	for _, s := range t.slots {
		if s.e != nil {
			f(s.e)
		}
	}
}
