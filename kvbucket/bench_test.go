package kvbucket

import (
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/keyhash"
	isecret "github.com/edgelimit/edgelimit/internal/secret"
)

// benchKeys are 100,000 distinct keys as the engine hands them over:
// keyed hashes, 22 bytes of base64url.
var benchKeys = func() []string {
	h, err := keyhash.New(make([]byte, isecret.MinLength))
	if err != nil {
		panic(err)
	}
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = h.Hash("bench", fmt.Appendf(nil, "192.0.2.%d/%d", i%256, i))
	}
	return keys
}()

// reqKeys are copies of benchKeys with their own bytes: as in production,
// where every request hashes its key anew, a lookup compares against a
// stored key it does not share memory with.
var reqKeys = func() []string {
	keys := make([]string, len(benchKeys))
	for i, k := range benchKeys {
		keys[i] = strings.Clone(k)
	}
	return keys
}()

// shuffledKeys are reqKeys in one fixed shuffled order, as the middleware
// benchmark (bench/) sends them: walking reqKeys in order reaches the
// entries in the order they were made, neighbours in memory, so the
// hardware's prefetching hides the cache misses a key not used lately
// costs; this order does not.
var shuffledKeys = func() []string {
	keys := slices.Clone(reqKeys)
	rng := mrand.New(mrand.NewPCG(1, 2))
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys
}()

// BenchmarkAllow compares a cached kvbucket decision with
// golang.org/x/time/rate (one Limiter per key in a map behind a mutex), and
// shows an uncached decision over the in-memory KV for scale. Every
// goroutine walks the 100,000 keys (fresh copies, see reqKeys) from its own
// offset; kvbucket-cached-shuffled walks them in a shuffled order
// (shuffledKeys), where every lookup is of a key not used lately.
//
//	go test -run '^$' -bench BenchmarkAllow -benchmem ./kvbucket/
func BenchmarkAllow(b *testing.B) {
	n := uint64(len(benchKeys))
	walkKeys := func(b *testing.B, keys []string, allow func(key string) bool) {
		b.ReportAllocs()
		var offset atomic.Uint64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := offset.Add(1) * 7919
			for pb.Next() {
				allow(keys[i%n])
				i++
			}
		})
	}
	walk := func(b *testing.B, allow func(key string) bool) { walkKeys(b, reqKeys, allow) }

	cached := func(keys []string) func(b *testing.B) {
		return func(b *testing.B) {
			bucket := benchBucket(b, false)
			before := bucket.Stats()
			walkKeys(b, keys, func(key string) bool {
				d, _ := bucket.Allow(ctx, edgelimit.Request{Key: key})
				return d.Allowed
			})
			b.StopTimer()
			if after := bucket.Stats(); after.Synced != before.Synced {
				b.Fatalf("%d decisions read the KV; the benchmark must measure cached ones", after.Synced-before.Synced)
			}
		}
	}
	b.Run("kvbucket-cached", cached(reqKeys))
	b.Run("kvbucket-cached-shuffled", cached(shuffledKeys))
	b.Run("kvbucket-cached-shuffled-denied", func(b *testing.B) {
		// Every key's bucket is empty (one token a month, spent by the first
		// pass; the second, past the key's first sync interval, found it
		// empty and read it again): each decision is a denial the local
		// state proves (as a flood's), no KV call; bench/'s kv-cached
		// denied cell is this one.
		bucket := benchBucketOf(b, 1, 30*24*time.Hour, false)
		before := bucket.Stats()
		walkKeys(b, shuffledKeys, func(key string) bool {
			d, _ := bucket.Allow(ctx, edgelimit.Request{Key: key})
			if d.Allowed {
				b.Fatal("a decision was allowed; the benchmark must measure denials")
			}
			return d.Allowed
		})
		b.StopTimer()
		if after := bucket.Stats(); after.Synced != before.Synced {
			b.Fatalf("%d decisions read the KV; the benchmark must measure cached ones", after.Synced-before.Synced)
		}
	})

	b.Run("x-time-rate-map", func(b *testing.B) {
		var mu sync.Mutex
		limiters := make(map[string]*rate.Limiter, len(benchKeys))
		for _, k := range benchKeys {
			limiters[k] = rate.NewLimiter(1_000_000, 1_000_000)
		}
		walk(b, func(key string) bool {
			mu.Lock()
			l := limiters[key]
			if l == nil {
				l = rate.NewLimiter(1_000_000, 1_000_000)
				limiters[key] = l
			}
			mu.Unlock()
			return l.Allow()
		})
	})

	b.Run("kvbucket-uncached-memory", func(b *testing.B) {
		bucket := benchBucket(b, true)
		walk(b, func(key string) bool {
			d, _ := bucket.Allow(ctx, edgelimit.Request{Key: key})
			return d.Allowed
		})
	})
}

// BenchmarkAllowDefaultCache is a decision over 100,000 keys on a Bucket
// of the default CacheSize, as a function with 100,000 active clients runs
// it (issue #16: with a cache of 10,000 keys, most decisions found their
// key evicted and paid a strong read and a write on the KV). kv-calls/op
// is the KV calls per decision: 0 when every key stays cached.
//
//	go test -run '^$' -bench BenchmarkAllowDefaultCache -benchmem ./kvbucket/
func BenchmarkAllowDefaultCache(b *testing.B) {
	kv := NewMemory(MemoryConfig{MaxKeys: 2 * len(benchKeys)})
	bucket := mustNew(b, Config{Policy: kvPolicy("bench", 1_000_000, 1_000_000, time.Second, 24*time.Hour), KV: kv})
	now := time.Now()
	for _, at := range []time.Time{now.Add(-48 * time.Hour), now.Add(-time.Minute)} {
		for _, k := range benchKeys {
			if _, err := bucket.AllowAt(ctx, at, edgelimit.Request{Key: k}); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := uint64(len(benchKeys))
	before := bucket.Stats()
	b.ReportAllocs()
	var offset atomic.Uint64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := offset.Add(1) * 7919
		for pb.Next() {
			bucket.Allow(ctx, edgelimit.Request{Key: reqKeys[i%n]})
			i++
		}
	})
	b.StopTimer()
	after := bucket.Stats()
	b.ReportMetric(float64(after.Synced-before.Synced)/float64(b.N), "kv-calls/op")
}

// benchBucket returns a bucket (1,000,000 per second, synced daily) with
// every bench key past its first sync interval and synced once, so that
// cached decisions stay local: the keys are first read two days ago and
// synced a minute ago (each is the only writer of its key: its share is the
// whole bucket). Decisions then read the clock, as in production.
func benchBucket(b *testing.B, noCache bool) *Bucket {
	return benchBucketOf(b, 1_000_000, time.Second, noCache)
}

// benchBucketOf is benchBucket with limit tokens (and as many of burst)
// per window.
func benchBucketOf(b *testing.B, limit int64, window time.Duration, noCache bool) *Bucket {
	b.Helper()
	kv := NewMemory(MemoryConfig{MaxKeys: 2 * len(benchKeys)})
	bucket := mustNew(b, Config{
		Policy:    kvPolicy("bench", limit, limit, window, 24*time.Hour),
		KV:        kv,
		CacheSize: 2 * len(benchKeys),
		NoCache:   noCache,
	})
	now := time.Now()
	for _, at := range []time.Time{now.Add(-48 * time.Hour), now.Add(-time.Minute)} {
		for _, k := range benchKeys {
			if _, err := bucket.AllowAt(ctx, at, edgelimit.Request{Key: k}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return bucket
}

// BenchmarkParamsTakeAt is the pure algorithm alone.
func BenchmarkParamsTakeAt(b *testing.B) {
	p := Params{Capacity: 100, Limit: 100, Window: time.Second}
	s := p.Full(t0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s, _ = p.TakeAt(s, t0.Add(time.Duration(i)*time.Millisecond), 1)
	}
}
