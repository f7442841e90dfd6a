package durablecounter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
)

// benchKeys are 100,000 distinct keys hashed the way the engine hashes
// them, so the benchmarks measure a realistic spread, not one hot key.
var benchKeys = func() []string {
	h, err := edgelimit.NewKeyHasher([]byte("benchmark-secret-benchmark-secret"))
	if err != nil {
		panic(err)
	}
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = h.Hash("bench", fmt.Appendf(nil, "i:10.%d.%d.%d", i>>16, i>>8&255, i&255))
	}
	return keys
}()

// BenchmarkAllowMemory measures Counter.Allow on the memory store over
// 100,000 keys, in parallel. "fixed clock" injects a constant time (the
// counter alone); "time.Now" is what `edgelimit serve` runs. The limit is
// high enough that every decision is an admission that writes.
func BenchmarkAllowMemory(b *testing.B) {
	for _, bc := range []struct {
		name   string
		shards int
		now    func() time.Time
	}{
		{"fixed-clock/shards=1", 1, func() time.Time { return time.Unix(1_700_000_000, 0) }},
		{"fixed-clock/shards=16", 16, func() time.Time { return time.Unix(1_700_000_000, 0) }},
		{"fixed-clock/shards=64", 64, func() time.Time { return time.Unix(1_700_000_000, 0) }},
		{"fixed-clock/shards=256", 256, func() time.Time { return time.Unix(1_700_000_000, 0) }},
		{"time.Now/shards=64", 64, time.Now},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store := durablecounter.NewMemoryStore(durablecounter.MemoryConfig{Shards: bc.shards})
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &edgelimit.Policy{Name: "bench", Limit: 1 << 50, Window: time.Hour},
				Store:  store,
				Now:    bc.now,
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for _, k := range benchKeys { // every key exists: measure steady state
				if _, err := c.Allow(ctx, edgelimit.Request{Key: k}); err != nil {
					b.Fatal(err)
				}
			}
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 7919 // each goroutine starts elsewhere
				for pb.Next() {
					i = (i + 1) % len(benchKeys)
					if _, err := c.Allow(ctx, edgelimit.Request{Key: benchKeys[i]}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkAllowBatchMemory measures AllowBatch of two policies.
func BenchmarkAllowBatchMemory(b *testing.B) {
	store := durablecounter.NewMemoryStore(durablecounter.MemoryConfig{})
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	mk := func(name string) *durablecounter.Counter {
		c, err := durablecounter.New(durablecounter.Config{
			Policy: &edgelimit.Policy{Name: name, Limit: 1 << 50, Window: time.Hour}, Store: store, Now: now,
		})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	a, c := mk("a"), mk("b")
	ctx := context.Background()
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 7919
		items := make([]edgelimit.BatchItem, 2)
		for pb.Next() {
			i = (i + 1) % len(benchKeys)
			items[0] = edgelimit.BatchItem{Limiter: a, Request: edgelimit.Request{Key: benchKeys[i]}}
			items[1] = edgelimit.BatchItem{Limiter: c, Request: edgelimit.Request{Key: benchKeys[i]}}
			if _, err := a.AllowBatch(ctx, items); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkBaselineRateMap is the yardstick the foundation issue quotes: a
// bare x/time/rate limiter looked up in a mutex-guarded map of the same
// 100,000 keys. Run it beside BenchmarkAllowMemory; on a shared machine only
// numbers from the same run compare.
func BenchmarkBaselineRateMap(b *testing.B) {
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter, len(benchKeys))
	for _, k := range benchKeys {
		m[k] = rate.NewLimiter(1e9, 1<<30)
	}
	t0 := time.Unix(1_700_000_000, 0)
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 7919
		for pb.Next() {
			i = (i + 1) % len(benchKeys)
			mu.Lock()
			m[benchKeys[i]].AllowN(t0, 1)
			mu.Unlock()
		}
	})
}
