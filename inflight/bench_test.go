package inflight_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// benchKeys are 100,000 distinct keys hashed as the engine hashes them.
var benchKeys = limitertest.HashedKeys("bench", 100_000)

func benchLimiter(b *testing.B, limit int64) *inflight.Limiter {
	store := inflight.NewMemory(inflight.MemoryConfig{})
	l, err := inflight.New(inflight.Config{
		Policy: &policy.Policy{Name: "speech", Strategy: inflight.Strategy, Limit: limit, Window: 15 * time.Minute},
		Store:  store,
	})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkTakeRelease is one request's work on a memory store: a take
// before the handler and a release after it, over distinct keys, from
// every core.
func BenchmarkTakeRelease(b *testing.B) {
	l := benchLimiter(b, 2)
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 0)
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 7919
		for pb.Next() {
			i = (i + 1) % len(benchKeys)
			r := edgelimit.Request{Key: benchKeys[i], At: at}
			d, err := l.Allow(ctx, r)
			if err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
			if err := l.Finish(ctx, r, d, 200, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDenied is a take that finds the key's slots all held.
func BenchmarkDenied(b *testing.B) {
	l := benchLimiter(b, 1)
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 0)
	for _, k := range benchKeys {
		if _, err := l.Allow(ctx, edgelimit.Request{Key: k, At: at}); err != nil {
			b.Fatal(err)
		}
	}
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 7919
		for pb.Next() {
			i = (i + 1) % len(benchKeys)
			if d, err := l.Allow(ctx, edgelimit.Request{Key: benchKeys[i], At: at}); err != nil || d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
}

// BenchmarkTakeCost compares a request holding 3 slots with one holding 1
// (limit 8), take and release on a memory store over distinct keys: the
// units are one number in the same holder, so they cost the same.
func BenchmarkTakeCost(b *testing.B) {
	for _, units := range []int64{1, 3} {
		b.Run(fmt.Sprint("cost=", units), func(b *testing.B) {
			l := benchLimiter(b, 8)
			ctx := context.Background()
			at := time.Unix(1_700_000_000, 0)
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 7919
				for pb.Next() {
					i = (i + 1) % len(benchKeys)
					r := edgelimit.Request{Key: benchKeys[i], At: at, Cost: units}
					d, err := l.Allow(ctx, r)
					if err != nil || !d.Allowed {
						b.Fatal(d, err)
					}
					if err := l.Finish(ctx, r, d, 200, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
