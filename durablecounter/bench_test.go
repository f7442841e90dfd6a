package durablecounter_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/overrides"
	"github.com/edgelimit/edgelimit/policy"
)

// benchKeys are 100,000 distinct keys hashed the way the engine hashes
// them, so the benchmarks measure a realistic spread, not one hot key.
var benchKeys = limitertest.HashedKeys("bench", 100_000)

// benchPolicy is a policy of alg whose limit no benchmark reaches, so that
// every decision is an admission that writes (the sliding log, whose limit
// is bounded, gets its largest; gcra one unit a second with a burst of a
// billion, so that its TAT stays ahead of the clock and its items live).
func benchPolicy(name, alg string, window time.Duration) *policy.Policy {
	p := &policy.Policy{Name: name, Limit: 1 << 50, Window: window, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg)}}
	switch alg {
	case string(durablecounter.SlidingLog):
		p.Limit = durablecounter.MaxSlidingLogLimit
	case string(durablecounter.GCRA):
		p.Limit, p.Window, opts(p).Burst = 3600, time.Hour, 1e9
	}
	return p
}

// runParallel calls allow from every benchmark goroutine, each starting
// elsewhere in benchKeys.
func runParallel(b *testing.B, allow func(key string) error) {
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 7919
		for pb.Next() {
			i = (i + 1) % len(benchKeys)
			if err := allow(benchKeys[i]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAllowMemory measures Counter.Allow of every algorithm on the
// memory store over 100,000 keys, in parallel. "fixed-clock" injects a
// constant time (the counter alone); "time.Now" is what `edgelimit serve`
// runs (the sliding log then gets a 1 s window, so that its buckets stay
// few). Every decision is an admission that writes.
//
//	go test -run '^$' -bench 'BenchmarkAllowMemory$' -benchmem ./durablecounter/
func BenchmarkAllowMemory(b *testing.B) {
	for _, alg := range allAlgorithms {
		for _, clock := range []string{"fixed-clock", "time.Now"} {
			b.Run(alg+"/"+clock, func(b *testing.B) {
				now, window := func() time.Time { return time.Unix(1_700_000_000, 0) }, time.Hour
				if clock == "time.Now" {
					now = time.Now
					if alg == string(durablecounter.SlidingLog) {
						window = time.Second
					}
				}
				c, err := durablecounter.New(durablecounter.Config{
					Policy: benchPolicy("bench", alg, window),
					Store:  durablecounter.NewMemory(durablecounter.MemoryConfig{}),
					Now:    now,
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
				runParallel(b, func(key string) error {
					_, err := c.Allow(ctx, edgelimit.Request{Key: key})
					return err
				})
			})
		}
	}
}

// BenchmarkAllowMemoryRandom is BenchmarkAllowMemory's fixed clock with
// the keys in a random order. BenchmarkAllowMemory walks them in the order
// they were created, which is the order a store that allocated an entry
// per key laid its entries out in memory: the hardware prefetcher then
// hides the pointer chase that real traffic, in no particular order, pays
// (issue #16: the Memory store's map held *memEntry; it holds values now).
//
//	go test -run '^$' -bench 'BenchmarkAllowMemoryRandom' -benchmem ./durablecounter/
func BenchmarkAllowMemoryRandom(b *testing.B) {
	for _, alg := range allAlgorithms {
		b.Run(alg, func(b *testing.B) {
			c, err := durablecounter.New(durablecounter.Config{
				Policy: benchPolicy("bench", alg, time.Hour),
				Store:  durablecounter.NewMemory(durablecounter.MemoryConfig{}),
				Now:    func() time.Time { return time.Unix(1_700_000_000, 0) },
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for _, k := range benchKeys {
				if _, err := c.Allow(ctx, edgelimit.Request{Key: k}); err != nil {
					b.Fatal(err)
				}
			}
			order := rand.New(rand.NewPCG(1, 2)).Perm(len(benchKeys))
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 7919
				for pb.Next() {
					i = (i + 1) % len(order)
					if _, err := c.Allow(ctx, edgelimit.Request{Key: benchKeys[order[i]]}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkAllowMemoryShards measures the fixed window on memory stores of
// 1 to 256 independently locked shards (MemoryConfig.Shards).
func BenchmarkAllowMemoryShards(b *testing.B) {
	for _, shards := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			c, err := durablecounter.New(durablecounter.Config{
				Policy: benchPolicy("bench", string(durablecounter.FixedWindow), time.Hour),
				Store:  durablecounter.NewMemory(durablecounter.MemoryConfig{Shards: shards}),
				Now:    func() time.Time { return time.Unix(1_700_000_000, 0) },
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			runParallel(b, func(key string) error {
				_, err := c.Allow(ctx, edgelimit.Request{Key: key})
				return err
			})
		})
	}
}

// BenchmarkDenyCache measures a repeat denial answered by the deny cache
// (no store call), for 100,000 keys that have spent their limit.
func BenchmarkDenyCache(b *testing.B) {
	for _, alg := range allAlgorithms {
		b.Run(alg, func(b *testing.B) {
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &policy.Policy{Name: "deny", Limit: 1, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), DenyCache: true}},
				Store:  durablecounter.NewMemory(durablecounter.MemoryConfig{}),
				Now:    func() time.Time { return time.Unix(1_700_000_000, 0) },
				// room for every key
				DenyCacheSize: 2 * len(benchKeys),
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for _, k := range benchKeys {
				for range 2 { // spend, then the first denial fills the cache
					if _, err := c.Allow(ctx, edgelimit.Request{Key: k}); err != nil {
						b.Fatal(err)
					}
				}
			}
			runParallel(b, func(key string) error {
				d, err := c.Allow(ctx, edgelimit.Request{Key: key})
				if err == nil && d.Allowed {
					err = fmt.Errorf("key %s allowed", key)
				}
				return err
			})
		})
	}
}

// BenchmarkAllowBatchMemory measures AllowBatch of two policies.
func BenchmarkAllowBatchMemory(b *testing.B) {
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	mk := func(name string) *durablecounter.Counter {
		c, err := durablecounter.New(durablecounter.Config{
			Policy: &policy.Policy{Name: name, Limit: 1 << 50, Window: time.Hour}, Store: store, Now: now,
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

// BenchmarkPeekMemory measures Peek on the memory store over 100,000 keys
// (1,000 of which have spent a unit): a read under the shard's lock and the
// decision, nothing spent.
//
//	go test -run '^$' -bench 'BenchmarkPeekMemory' -benchmem ./durablecounter/
func BenchmarkPeekMemory(b *testing.B) {
	for _, alg := range []string{string(durablecounter.FixedWindow), string(durablecounter.SlidingWindow), string(durablecounter.SlidingLog), string(durablecounter.GCRA)} {
		b.Run(alg, func(b *testing.B) {
			now := time.Unix(1_700_000_000, 0)
			c, err := durablecounter.New(durablecounter.Config{
				Policy: benchPolicy("peek", alg, time.Hour), Store: durablecounter.NewMemory(durablecounter.MemoryConfig{}),
				Now: func() time.Time { return now },
			})
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range benchKeys[:1000] {
				if _, err := c.Allow(context.Background(), edgelimit.Request{Key: k}); err != nil {
					b.Fatal(err)
				}
			}
			runParallel(b, func(key string) error {
				_, err := c.Peek(context.Background(), edgelimit.Request{Key: key})
				return err
			})
		})
	}
}

// BenchmarkEngineDurable measures the engine deciding with a durable
// Counter on the memory store, over 100,000 client addresses, in parallel:
// a policy without tiers or overrides ("plain": what issue #12 must not
// make slower), one whose requests name a tier ("tier"), and one with
// overrides: true whose keys have none ("overrides": one override read per
// key, then the engine's cache).
//
//	go test -run '^$' -bench 'BenchmarkEngineDurable' -benchmem ./durablecounter/
func BenchmarkEngineDurable(b *testing.B) {
	f, err := policy.Parse("bench.yaml", []byte(`version: 1
policies:
  - {name: plain, routes: ["GET /plain"], key: ip, strategy: durable, limit: 1000000000, window: 1h}
  - name: tier
    routes: ["GET /tier"]
    key: ip
    strategy: durable
    limit: 1000000000
    window: 1h
    tiers: {by: header:X-Plan, default: free, levels: {free: {limit: 1000000000}, pro: {limit: 2000000000}}}
  - {name: overrides, routes: ["GET /overrides"], key: ip, strategy: durable, limit: 1000000000, window: 1h, overrides: true}
`))
	if err != nil {
		b.Fatal(err)
	}
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte("benchmark-secret-benchmark-secret"),
		Now: now, Overrides: overrides.NewMemory(now), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
		}})
	if err != nil {
		b.Fatal(err)
	}
	ips := make([]string, 100_000)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255)
	}
	ctx := context.Background()
	for _, path := range []string{"/plain", "/tier", "/overrides"} {
		b.Run(path[1:], func(b *testing.B) {
			in := func(i int) *edgelimit.Input {
				return &edgelimit.Input{Method: "GET", Path: path, SourceIP: ips[i%len(ips)], Header: limitertest.Headers{"X-Plan": "pro"}}
			}
			for i := range ips { // every key exists (and its override is cached): the steady state
				if v := e.Decide(ctx, in(i)); !v.Allowed {
					b.Fatal(v.Status)
				}
			}
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 7919
				for pb.Next() {
					i++
					if v := e.Decide(ctx, in(i)); !v.Allowed {
						b.Error(v.Status)
						return
					}
				}
			})
		})
	}
}
