package kvbucket

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// tableEntry makes an entry for key with hash h, as shard.lookup does
// (no prefix).
func tableEntry(key string, h uint64) *entry {
	e := &entry{hash: h, shortLen: longKey, long: &key}
	if len(key) <= shortKey {
		e.shortLen, e.long = uint8(copy(e.short[:], key)), nil
	}
	return e
}

// keyOf is e's key (tableEntry's: no prefix).
func keyOf(e *entry) string { return (&Bucket{}).kvKey(e) }

// checkTable compares t with want (key → entry) both ways: every entry of
// want is found under its key and hash, the table holds nothing else, and
// every entry is reachable from its home slot without an empty slot on the
// way (the invariant deletion's back-shift keeps).
func checkTable(t *testing.T, tb *entryTable, want map[string]*entry) {
	t.Helper()
	if tb.n != len(want) {
		t.Fatalf("table holds %d entries, want %d", tb.n, len(want))
	}
	for k, e := range want {
		if got := tb.find(k, e.hash, 0); got != e {
			t.Fatalf("find(%q, %#x) = %p, want %p", k, e.hash, got, e)
		}
	}
	held := 0
	for i, s := range tb.slots {
		if s.e == nil {
			continue
		}
		held++
		if want[keyOf(s.e)] != s.e || s.h != s.e.hash {
			t.Fatalf("slot %d holds %q (hash %#x, slot hash %#x), not in the model", i, keyOf(s.e), s.e.hash, s.h)
		}
		for j := tb.home(s.h); j != i; j = tb.next(j) {
			if tb.slots[j].e == nil {
				t.Fatalf("slot %d (%q) is cut off from its home %d by the empty slot %d", i, keyOf(s.e), tb.home(s.h), j)
			}
		}
	}
	if held != len(want) {
		t.Fatalf("%d slots hold an entry, want %d", held, len(want))
	}
}

// TestEntryTableDifferential runs random inserts, finds and removes on an
// entryTable and on a Go map side by side. The hashes come from a small
// set, so that many keys share one (colliding keys are told apart by the
// key alone), and from hashes chosen to start their probe in the table's
// last slots, so that probe runs wrap around past the end; the keys are
// short (inline) and long.
func TestEntryTableDifferential(t *testing.T) {
	for _, fit := range []int{0, fitFor(40)} {
		t.Run(fmt.Sprint("fit", fit), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(fit)))
			tb := &entryTable{fit: fit}
			want := map[string]*entry{}
			hashOf := func(k string) uint64 {
				// Deterministic per key: a key keeps its hash.
				x := uint64(0)
				for _, c := range []byte(k) {
					x = x*31 + uint64(c)
				}
				switch x % 3 {
				case 0:
					return x % 5 // few hashes: collisions
				case 1:
					// A hash whose probe starts in the last slot of a
					// table of the current size (or of 16).
					size := max(len(tb.slots), tableMin)
					sized := &entryTable{slots: make([]tableSlot, size)}
					for h := x; ; h++ {
						if sized.home(h) == size-1 {
							return h
						}
					}
				default:
					return x * 0x9e3779b97f4a7c15
				}
			}
			keys := make([]string, 200)
			for i := range keys {
				keys[i] = fmt.Sprint("k", i)
				if i%4 == 0 {
					keys[i] += "-long-enough-to-live-outside-the-entry"
				}
			}
			hashes := map[string]uint64{}
			for step := range 20_000 {
				k := keys[rng.IntN(len(keys))]
				h, ok := hashes[k]
				if !ok {
					h = hashOf(k)
					hashes[k] = h
				}
				switch e := want[k]; {
				case e == nil && rng.IntN(3) > 0:
					e = tableEntry(k, h)
					tb.insert(e)
					want[k] = e
				case e != nil && rng.IntN(2) == 0:
					if !tb.remove(e) {
						t.Fatalf("step %d: remove(%q) found nothing", step, k)
					}
					delete(want, k)
					if tb.remove(e) {
						t.Fatalf("step %d: %q removed twice", step, k)
					}
				default:
					if got := tb.find(k, h, 0); got != e {
						t.Fatalf("step %d: find(%q) = %p, want %p", step, k, got, e)
					}
				}
				if step%97 == 0 {
					checkTable(t, tb, want)
				}
			}
			checkTable(t, tb, want)
			// Empty it: every entry goes, the table stays usable.
			for k, e := range want {
				if !tb.remove(e) {
					t.Fatalf("remove(%q) found nothing", k)
				}
				delete(want, k)
			}
			checkTable(t, tb, want)
			if tb.find("k1", hashes["k1"], 0) != nil || tb.remove(tableEntry("k1", 1)) {
				t.Error("an empty table finds or removes an entry")
			}
		})
	}
}

// TestEntryTableGrowth: a table grows to hold its entries at most 3/4 full,
// to no more than fit slots while its bound of entries fits there, and
// beyond fit (doubling) when more entries than the bound come.
func TestEntryTableGrowth(t *testing.T) {
	const bound = 1000
	tb := &entryTable{fit: fitFor(bound)}
	for i := range bound {
		tb.insert(tableEntry(fmt.Sprint(i), uint64(i)*0x9e3779b97f4a7c15))
		if tb.n*4 > len(tb.slots)*3 {
			t.Fatalf("%d entries in %d slots: more than 3/4 full", tb.n, len(tb.slots))
		}
	}
	if len(tb.slots) > fitFor(bound) {
		t.Errorf("%d entries (the bound) in %d slots, want at most %d", bound, len(tb.slots), fitFor(bound))
	}
	for i := bound; i < 2*bound; i++ {
		tb.insert(tableEntry(fmt.Sprint(i), uint64(i)*0x9e3779b97f4a7c15))
	}
	if tb.n != 2*bound || tb.n*4 > len(tb.slots)*3 {
		t.Errorf("beyond the bound: %d entries in %d slots", tb.n, len(tb.slots))
	}
}

// TestEntryTableSample: a sample holds up to k distinct entries of the
// table, k when the table has as many, and samples from random places
// reach every entry.
func TestEntryTableSample(t *testing.T) {
	tb := &entryTable{}
	var all []*entry
	tb.sample(evictSample, func(*entry) bool { t.Fatal("an empty table sampled an entry"); return false })
	for i := range 100 {
		e := tableEntry(fmt.Sprint(i), uint64(i)*0x9e3779b97f4a7c15)
		tb.insert(e)
		all = append(all, e)
	}
	seen := map[*entry]bool{}
	for range 1000 {
		got := map[*entry]bool{}
		tb.sample(evictSample, func(e *entry) bool {
			if got[e] {
				t.Fatalf("sample holds %q twice", keyOf(e))
			}
			got[e] = true
			seen[e] = true
			return true
		})
		if len(got) != evictSample {
			t.Fatalf("sample of %d entries, want %d", len(got), evictSample)
		}
	}
	if len(seen) != len(all) {
		t.Errorf("1000 samples reached %d of %d entries", len(seen), len(all))
	}
	// A table with fewer entries than k gives them all, once each; f
	// returning false ends the sample.
	small := &entryTable{}
	small.insert(all[0])
	small.insert(all[1])
	n := 0
	small.sample(evictSample, func(*entry) bool { n++; return true })
	if n != 2 {
		t.Errorf("a sample of a 2-entry table had %d entries", n)
	}
	n = 0
	tb.sample(evictSample, func(*entry) bool { n++; return n < 3 })
	if n != 3 {
		t.Errorf("a sample went on after f returned false: %d entries", n)
	}
}
