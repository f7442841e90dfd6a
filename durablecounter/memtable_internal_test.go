package durablecounter

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"
)

// TestMemTableAgainstMap runs random inserts, updates, deletes and sweeps
// on a memTable and on a Go map side by side and checks that they always
// hold the same items. Tags share a few top-bit prefixes, so that probe
// runs are long, wrap around the table's end and are cut by deletions,
// and a few control bytes, so that a probe meets slots whose byte matches
// and whose tag does not.
func TestMemTableAgainstMap(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		var tab memTable
		want := map[memKey]memEntry{}
		tags := map[memKey]uint64{}
		keyOf := func(i int) memKey {
			return memKeyOf(&itemID{prefix: "fw#p#", pid: prefixID("fw#p#"), key: fmt.Sprintf("key-%d", i), slot: int64(i % 3), shard: noShard})
		}
		tagOf := func(k memKey) uint64 {
			if tg, ok := tags[k]; ok {
				return tg
			}
			// Few homes (the top 3 bits), many collisions; four control
			// bytes (bits 8 to 15).
			tg := rng.Uint64()&^(1<<63|1<<62|1<<61|0xff<<8) | uint64(rng.IntN(8))<<61 | uint64(rng.IntN(4))<<8 | 1
			tags[k] = tg
			return tg
		}
		now := int64(0)
		for step := range 5000 {
			k := keyOf(rng.IntN(300))
			tg := tagOf(k)
			switch op := rng.IntN(10); {
			case op < 5:
				e := memEntry{st: state{exists: true, n: int64(step)}, expires: now + int64(rng.IntN(100))}
				tab.set(tg, k, e, tab.find(tg, &k))
				want[k] = e
			case op < 8:
				tab.del(tg, &k)
				delete(want, k)
			case op < 9:
				now += int64(rng.IntN(30))
				next := tab.sweep(now)
				wantNext := int64(1<<63 - 1)
				for k, e := range want {
					if e.expires <= now {
						delete(want, k)
					} else {
						wantNext = min(wantNext, e.expires)
					}
				}
				if next != wantNext {
					t.Fatalf("seed %d step %d: sweep's next expiry %d, want %d", seed, step, next, wantNext)
				}
			default:
				if s := tab.find(tg, &k); s != nil {
					s.e.st.p++ // updated in place
					e := want[k]
					e.st.p++
					want[k] = e
				}
			}
			if tab.n != len(want) {
				t.Fatalf("seed %d step %d: table holds %d, map %d", seed, step, tab.n, len(want))
			}
			if tab.n > 0 && tab.n*4 > len(tab.slots)*3 {
				t.Fatalf("seed %d step %d: %d items in %d slots", seed, step, tab.n, len(tab.slots))
			}
			checkCtrl(t, &tab)
		}
		for i := range 300 {
			k := keyOf(i)
			s := tab.find(tagOf(k), &k)
			e, ok := want[k]
			switch {
			case ok != (s != nil):
				t.Fatalf("seed %d: key %d held by table %v, by map %v", seed, i, s != nil, ok)
			case ok && s.e != e:
				t.Fatalf("seed %d: key %d: table %+v, map %+v", seed, i, s.e, e)
			}
		}
	}
}

// checkCtrl fails t unless every slot's control byte says what the slot
// holds: 0 for an empty slot, ctrlOf its tag for a full one.
func checkCtrl(t *testing.T, tab *memTable) {
	t.Helper()
	if len(tab.ctrl) != len(tab.slots) {
		t.Fatalf("%d control bytes for %d slots", len(tab.ctrl), len(tab.slots))
	}
	for i := range tab.slots {
		want := uint8(0)
		if tg := tab.slots[i].tag; tg != 0 {
			want = ctrlOf(tg)
		}
		if tab.ctrl[i] != want {
			t.Fatalf("slot %d (tag %#x): control byte %d, want %d", i, tab.slots[i].tag, tab.ctrl[i], want)
		}
	}
}

// TestMemTableSweepEmpties checks that a sweep that drops everything
// leaves every slot empty and a table that works.
func TestMemTableSweepEmpties(t *testing.T) {
	var tab memTable
	for i := range 100 {
		k := memKeyOf(&itemID{prefix: "p#", pid: prefixID("p#"), key: fmt.Sprint(i), slot: noSlot, shard: noShard})
		tab.insert(memTag(uint64(i), 7, noSlot, noShard), k, memEntry{expires: 10})
	}
	if next := tab.sweep(10); next != 1<<63-1 || tab.n != 0 {
		t.Fatalf("after sweeping everything: next %d, n %d", next, tab.n)
	}
	for i := range tab.slots {
		if tab.slots[i] != (memSlot{}) || tab.ctrl[i] != 0 {
			t.Fatalf("after sweeping everything, slot %d holds %+v (control byte %d)", i, tab.slots[i], tab.ctrl[i])
		}
	}
	k := memKeyOf(&itemID{prefix: "p#", pid: prefixID("p#"), key: "again", slot: noSlot, shard: noShard})
	tag := memTag(1, 7, noSlot, noShard)
	if tab.find(tag, &k) != nil {
		t.Fatal("an empty table found an item")
	}
	tab.set(tag, k, memEntry{expires: 20}, nil)
	if s := tab.find(tag, &k); s == nil || s.e.expires != 20 {
		t.Fatalf("after sweeping, an insert is not found: %v", s)
	}
}

// BenchmarkMemTable is the measurement memTable's doc cites: looking an
// item up and writing its entry back, over 100,000 keys in random order in
// 64 shards, in a memTable and in the Go map it replaced.
//
//	go test -run '^$' -bench 'BenchmarkMemTable' -benchmem ./durablecounter/
func BenchmarkMemTable(b *testing.B) {
	const n, shards = 100_000, 64
	seed := maphash.MakeSeed()
	ids := make([]itemID, n)
	for i := range ids {
		ids[i] = itemID{prefix: "fw#bench#", pid: prefixID("fw#bench#"), key: fmt.Sprintf("%022x", rand.Uint64()), slot: 5, shard: noShard}
	}
	order := rand.Perm(n)
	b.Run("map", func(b *testing.B) {
		ms := make([]map[memKey]memEntry, shards)
		for i := range ms {
			ms[i] = map[memKey]memEntry{}
		}
		for i := range ids {
			ms[maphash.String(seed, ids[i].key)%shards][memKeyOf(&ids[i])] = memEntry{}
		}
		i := 0
		for b.Loop() {
			id := &ids[order[i]]
			i = (i + 1) % n
			m := ms[maphash.String(seed, id.key)%shards]
			k := memKeyOf(id)
			e := m[k]
			e.st.n++
			m[k] = e
		}
	})
	b.Run("memTable", func(b *testing.B) {
		ts := make([]memTable, shards)
		tag := func(id *itemID) (uint64, uint64) {
			h := maphash.String(seed, id.key)
			return h % shards, memTag(h, uint64(id.pid), id.slot, id.shard)
		}
		for i := range ids {
			sh, tg := tag(&ids[i])
			ts[sh].insert(tg, memKeyOf(&ids[i]), memEntry{})
		}
		i := 0
		for b.Loop() {
			id := &ids[order[i]]
			i = (i + 1) % n
			sh, tg := tag(id)
			k := memKeyOf(id)
			if s := ts[sh].find(tg, &k); s != nil {
				s.e.st.n++
			}
		}
	})
}

// TestMemTableSweepAllocatesNothing: a sweep works in place, so that a
// decision that sweeps a shard allocates nothing.
func TestMemTableSweepAllocatesNothing(t *testing.T) {
	var tab memTable
	for i := range 1000 {
		k := memKeyOf(&itemID{key: fmt.Sprint(i), slot: noSlot, shard: noShard})
		tab.insert(memTag(uint64(i)*0x9e3779b97f4a7c15, 1, noSlot, noShard), k, memEntry{expires: int64(i)})
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	next := tab.sweep(500)
	runtime.ReadMemStats(&after)
	if n := after.Mallocs - before.Mallocs; n != 0 {
		t.Errorf("a sweep allocated %d times", n)
	}
	if next != 501 || tab.n != 499 {
		t.Errorf("after the sweep: next expiry %d, %d items; want 501, 499", next, tab.n)
	}
}

// TestMemSlotSize pins the layout memSlot's doc describes.
func TestMemSlotSize(t *testing.T) {
	var s memSlot
	if got := unsafe.Sizeof(s); got != 128 {
		t.Errorf("memSlot is %d bytes, want 128", got)
	}
	if got := unsafe.Offsetof(s.k) + unsafe.Sizeof(s.k); got > 64 {
		t.Errorf("a slot's hash and key end at byte %d, past its first cache line", got)
	}
	if got := unsafe.Offsetof(s.e); got != 64 {
		t.Errorf("a slot's entry starts at byte %d, want 64", got)
	}
}
