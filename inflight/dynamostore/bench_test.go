package dynamostore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/policy"
)

// BenchmarkTakeRelease is one request's store work on a local server: a
// take and a release, two UpdateItems, over distinct keys. It measures the
// server and the SDK on this machine, not DynamoDB; the calls per request
// are what TestRoundTrips pins.
func BenchmarkTakeRelease(b *testing.B) {
	for _, s := range ddbtest.Servers(b) {
		b.Run(s.Name, func(b *testing.B) {
			client, table, counter := ddbtest.Table(b, s)
			store, err := newBenchStore(client, table)
			if err != nil {
				b.Fatal(err)
			}
			l, err := inflight.New(inflight.Config{
				Policy: &policy.Policy{Name: "speech", Limit: 2, Window: 15 * time.Minute}, Store: store,
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var n atomic.Int64
			counter.Reset()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := edgelimit.Request{Key: fmt.Sprint("k", n.Add(1))}
					d, err := l.Allow(ctx, r)
					if err != nil || !d.Allowed {
						b.Fatal(d, err)
					}
					if err := l.Finish(ctx, r, d, 200, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.ReportMetric(float64(counter.Total())/float64(b.N), "calls/op")
		})
	}
}

// BenchmarkTakeCost compares a take of 3 slots with a take of 1 (limit 8)
// on a local server, each on a fresh key and not released: calls/op is
// the calls of one take, 1 UpdateItem whatever its units.
func BenchmarkTakeCost(b *testing.B) {
	for _, s := range ddbtest.Servers(b) {
		for _, units := range []int64{1, 3} {
			b.Run(fmt.Sprintf("%s/cost=%d", s.Name, units), func(b *testing.B) {
				client, table, counter := ddbtest.Table(b, s)
				store, err := newBenchStore(client, table)
				if err != nil {
					b.Fatal(err)
				}
				l, err := inflight.New(inflight.Config{
					Policy: &policy.Policy{Name: "speech", Limit: 8, Window: 15 * time.Minute}, Store: store,
				})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				var n atomic.Int64
				counter.Reset()
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						r := edgelimit.Request{Key: fmt.Sprint("k", n.Add(1)), Cost: units}
						if d, err := l.Allow(ctx, r); err != nil || !d.Allowed {
							b.Fatal(d, err)
						}
					}
				})
				b.ReportMetric(float64(counter.Total())/float64(b.N), "calls/op")
			})
		}
	}
}
