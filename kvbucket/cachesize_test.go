package kvbucket

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/edgelimit/edgelimit"
)

// TestDefaultCacheHolds100kKeys pins DefaultCacheSize against a realistic
// key count (issue #16): 100,000 active keys must all stay in the cache.
// With the 10,000 of before, a key came back to an instance after 10,000
// others had pushed it out, so at 100,000 keys every decision was a strong
// read and a write: kv was effectively uncached. Here the second pass over
// the keys, a sync interval later, reads nothing (each key syncs with one
// write, as a cached key does) and nothing was evicted.
func TestDefaultCacheHolds100kKeys(t *testing.T) {
	const n = 100_000
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{MaxKeys: 2 * n, Now: clk.Now})
	b := mustNew(t, Config{Policy: kvPolicy("p", 10, 10, time.Minute, time.Second), KV: kv, Now: clk.Now})
	keys := benchKeys[:n]
	for pass, at := range []time.Duration{0, 1500 * time.Millisecond} {
		clk.Set(t0.Add(at))
		for _, k := range keys {
			if d, err := b.Allow(ctx, edgelimit.Request{Key: k}); err != nil || !d.Allowed {
				t.Fatalf("pass %d: Allow = %+v, %v", pass, d, err)
			}
		}
	}
	if st := b.Stats(); st.Reads != n || st.Evicted != 0 || st.Keys != n {
		t.Errorf("after two passes over %d keys: %d reads, %d evicted, %d keys cached; want %d, 0, %d (every key read once, none dropped)",
			n, st.Reads, st.Evicted, st.Keys, n, n)
	}
}

// TestCacheEntryBytes measures what one cached key costs in memory (the
// figure in Config.CacheSize's documentation): the heap a Bucket's cache
// grows by for 100,000 keys, each spent once, over the number of keys. The
// KV is filled with the same items beforehand, so that its share of the
// heap is not counted.
func TestCacheEntryBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const n = 100_000
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{MaxKeys: 2 * n, Now: clk.Now})
	fill := mustNew(t, Config{Policy: kvPolicy("p", 10, 10, time.Minute, time.Second), KV: kv, Now: clk.Now})
	keys := benchKeys[:n]
	for _, k := range keys {
		if _, err := fill.Allow(ctx, edgelimit.Request{Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	fill = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b := mustNew(t, Config{Policy: kvPolicy("p", 10, 10, time.Minute, time.Second), KV: kv, Now: clk.Now, CacheSize: 2 * n})
	for _, k := range keys {
		if _, err := b.Allow(ctx, edgelimit.Request{Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	t.Logf("a cached key: %.0f bytes of heap (the entry itself %d bytes; %d keys cached)", per, unsafe.Sizeof(entry{}), b.Stats().Keys)
	if per > 1024 {
		t.Errorf("a cached key costs %.0f bytes, more than the 1 KiB the documentation allows", per)
	}
	runtime.KeepAlive(b)
}

// TestCacheKeysOfEveryLength: the cache holds keys of up to 24 bytes
// inline and longer ones through their KV key; keys that differ only in
// length, or only past the 24th byte, are separate buckets either way.
func TestCacheKeysOfEveryLength(t *testing.T) {
	clk := newClock(t0)
	b := mustNew(t, Config{Policy: kvPolicy("p", 1, 1, time.Hour, time.Second), KV: NewMemory(MemoryConfig{Now: clk.Now}), Now: clk.Now})
	long := "0123456789abcdefghijklmnopqrstuvwxyz"
	var keys []string
	for n := 1; n <= len(long); n++ {
		keys = append(keys, long[:n], long[:n]+"\x00")
	}
	keys = append(keys, long+"A", long+"B")
	for round, want := range []bool{true, false} {
		for _, k := range keys {
			d, err := b.Allow(ctx, edgelimit.Request{Key: k})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != want {
				t.Errorf("round %d, key %q (%d bytes): allowed %v, want %v", round, k, len(k), d.Allowed, want)
			}
		}
	}
}
