package edgelimit_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// BenchmarkDecide measures the engine alone: route matching, key extraction
// and hashing, one limiter call that always allows, and the headers. The
// limiter is free so that what is measured is the engine's own cost.
func BenchmarkDecide(b *testing.B) {
	f, err := policy.Parse("bench.yaml", []byte(`version: 1
policies:
  - {name: one, routes: ["GET /one"], key: ip, strategy: durable, limit: 1000000, window: 1h}
  - {name: a, routes: ["GET /three"], key: ip, strategy: kv, limit: 1000000, window: 1h}
  - {name: b, routes: ["GET /three"], key: header:X-Api-Key, strategy: kv, limit: 1000000, window: 1h}
  - {name: c, routes: ["GET /three"], key: global, strategy: kv, limit: 1000000, window: 1h}
`))
	if err != nil {
		b.Fatal(err)
	}
	free := limitertest.LimiterFunc(func(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
		return edgelimit.Decision{Allowed: true, Limit: 1000000, Window: time.Hour, Remaining: 999999, Reset: time.Hour}, nil
	})
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) { return free, nil }})
	if err != nil {
		b.Fatal(err)
	}
	ips := make([]string, 100_000)
	for i := range ips {
		ips[i] = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	for _, path := range []string{"/one", "/three", "/unguarded"} {
		b.Run(path[1:], func(b *testing.B) {
			b.ReportAllocs()
			in := &edgelimit.Input{Method: "GET", Path: path, Header: limitertest.Headers{"x-api-key": "key-1"}}
			i := 0
			for b.Loop() {
				i++
				in.SourceIP = ips[i%len(ips)]
				if v := e.Decide(context.Background(), in); !v.Allowed {
					b.Fatal(v.Status)
				}
			}
		})
	}
}
