package kvbucket

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/edgelimit/edgelimit"
)

// hotBytes is the part of an entry a decision from the cache reads and
// writes, allowed or denied: its first three cache lines.
const hotBytes = 192

// TestEntryLayout pins what the entry's documentation says of its layout:
// 448 bytes (seven cache lines, one of Go's size classes, so that every
// entry the allocator places starts on a cache line), the fields of a
// decision from the cache within its first 192 bytes, and the pointers and
// the state of KV calls in flight after them.
func TestEntryLayout(t *testing.T) {
	var e entry
	if got := unsafe.Sizeof(e); got != 448 {
		t.Errorf("an entry is %d bytes, want 448 (a size class of whole cache lines)", got)
	}
	hot := map[string][2]uintptr{
		"short": {unsafe.Offsetof(e.short), unsafe.Sizeof(e.short)}, "shortLen": {unsafe.Offsetof(e.shortLen), 1},
		"known": {unsafe.Offsetof(e.known), 1}, "granted": {unsafe.Offsetof(e.granted), 1},
		"syncing": {unsafe.Offsetof(e.syncing), 1}, "busy": {unsafe.Offsetof(e.busy), 1},
		"refreshing": {unsafe.Offsetof(e.refreshing), 1}, "hasOwn": {unsafe.Offsetof(e.hasOwn), 1},
		"used": {unsafe.Offsetof(e.used), 8}, "tat": {unsafe.Offsetof(e.tat), unsafe.Sizeof(e.tat)},
		"pend": {unsafe.Offsetof(e.pend), unsafe.Sizeof(e.pend)}, "spent": {unsafe.Offsetof(e.spent), unsafe.Sizeof(e.spent)},
		"firstAt": {unsafe.Offsetof(e.firstAt), 8}, "grantAt": {unsafe.Offsetof(e.grantAt), 8},
		"degradedUntil": {unsafe.Offsetof(e.degradedUntil), 8}, "grantEnd": {unsafe.Offsetof(e.grantEnd), 8},
		"insts": {unsafe.Offsetof(e.insts), 8}, "learnedAt": {unsafe.Offsetof(e.learnedAt), 8},
		"ownTAT": {unsafe.Offsetof(e.ownTAT), unsafe.Sizeof(e.ownTAT)}, "hash": {unsafe.Offsetof(e.hash), 8},
	}
	for name, f := range hot {
		if f[0]+f[1] > hotBytes {
			t.Errorf("hot field %s ends at byte %d, beyond the first %d", name, f[0]+f[1], hotBytes)
		}
	}
	for name, off := range map[string]uintptr{
		"long": unsafe.Offsetof(e.long), "wait": unsafe.Offsetof(e.wait), "writing": unsafe.Offsetof(e.writing),
		"v": unsafe.Offsetof(e.v), "flight": unsafe.Offsetof(e.flight), "inflight": unsafe.Offsetof(e.inflight),
		"spentFlight": unsafe.Offsetof(e.spentFlight), "grantTAT": unsafe.Offsetof(e.grantTAT),
	} {
		if off < hotBytes {
			t.Errorf("cold field %s at byte %d, within the first %d", name, off, hotBytes)
		}
	}
	// The allocator's placement: entries made as shard.lookup makes them
	// start on a cache line.
	var keep []*entry
	for i := range 200 {
		p := &entry{hash: uint64(i)}
		keep = append(keep, p)
		if a := uintptr(unsafe.Pointer(p)); a%64 != 0 {
			t.Fatalf("entry %d at %#x: not on a cache line", i, a)
		}
	}
	_ = keep
}

// checkEntries checks, under each shard's lock, what the entries' copies
// and flags must agree with: hasOwn and ownTAT with the view (the
// denial's hot path reads the copies, never the view), busy with what is
// in flight, and that each entry is found under its own key.
func checkEntries(t *testing.T, b *Bucket) (n int) {
	t.Helper()
	for i := range b.cache.shards {
		s := &b.cache.shards[i]
		s.mu.Lock()
		s.t.each(func(e *entry) {
			n++
			if e.hasOwn != e.v.own.Has {
				t.Errorf("%q: hasOwn %v, the view's own part Has %v", b.kvKey(e), e.hasOwn, e.v.own.Has)
			}
			if e.hasOwn && e.ownTAT != e.v.own.TAT.Add(b.u.spentUnits(e.v.so)) {
				t.Errorf("%q: ownTAT %v, want own.TAT + W·so = %v", b.kvKey(e), e.ownTAT, e.v.own.TAT.Add(b.u.spentUnits(e.v.so)))
			}
			if e.busy != (e.flight.has || e.inflight.Sign() != 0) {
				t.Errorf("%q: busy %v with flight %v and inflight %v", b.kvKey(e), e.busy, e.flight.has, e.inflight)
			}
			key := b.kvKey(e)[len(b.prefix):]
			if got := s.find(key, e.hash); got != e {
				t.Errorf("%q: find returns %p, want its entry %p", key, got, e)
			}
		})
		s.mu.Unlock()
	}
	return n
}

// TestEntryCopiesUnderConcurrency: 64 goroutines decide, refund and peek
// keys short (inline) and long (through their KV key) on three instances
// in two regions, with caches far smaller than the keys (entries dropped,
// written back and read back all the time) and a sync interval of a
// millisecond (keys synced, granted shares, denials read again), while a
// checker looks at every entry between them (checkEntries), and once more
// at the end. (evictionUnderConcurrency pins the decisions' exactness on
// one instance.)
func TestEntryCopiesUnderConcurrency(t *testing.T) {
	const (
		burst   = 16
		workers = 64
		keys    = 96
	)
	clk := newClock(t0)
	// Two regions (each one instance's), so that a view holds another
	// region's spending (v.so, which ownTAT counts), and a third instance
	// sharing region a's part.
	r := newReplicated(0, clk.Now, "a", "b")
	kvA := &replicaKV{t: r, self: "a", others: []string{"b"}, now: clk.Now}
	kvB := &replicaKV{t: r, self: "b", others: []string{"a"}, now: clk.Now}
	pol := kvPolicy("copies", burst, burst, time.Hour, time.Millisecond)
	insts := []*Bucket{
		mustNew(t, Config{Policy: pol, KV: kvA, Now: clk.Now, CacheSize: 24}),
		mustNew(t, Config{Policy: pol, KV: kvA, Now: clk.Now, CacheSize: 40}),
		mustNew(t, Config{Policy: pol, KV: kvB, Now: clk.Now, CacheSize: 32}),
	}
	key := func(k int) string {
		if k%3 == 0 {
			return fmt.Sprintf("long-key-%d-beyond-the-24-bytes-held-inline", k)
		}
		return fmt.Sprint("k", k)
	}
	var failed atomic.Int64
	stop := make(chan struct{})
	var checker sync.WaitGroup
	checker.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, b := range insts {
				checkEntries(t, b)
			}
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for range 300 {
				k := rng.IntN(keys)
				if rng.IntN(2) == 0 {
					k = rng.IntN(keys / 8)
				}
				b := insts[rng.IntN(len(insts))]
				req := edgelimit.Request{Key: key(k)}
				r.replicate(clk.Tick(50 * time.Microsecond).UnixNano())
				switch rng.IntN(8) {
				case 0:
					if _, err := b.Peek(ctx, req); err != nil {
						failed.Add(1)
					}
				default:
					d, err := b.Allow(ctx, req)
					switch {
					case err != nil:
						failed.Add(1)
					case d.Allowed && rng.IntN(6) == 0:
						if err := b.Refund(ctx, req, d); err != nil {
							failed.Add(1)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	checker.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}
	n := 0
	for _, b := range insts {
		n += checkEntries(t, b)
		if st := b.Stats(); st.Evicted == 0 {
			t.Errorf("Stats = %+v: want evictions", st)
		}
	}
	if n == 0 {
		t.Fatal("no entries left to check")
	}
}
