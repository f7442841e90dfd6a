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
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// BenchmarkMaxDelay measures what max_delay costs an admitted request: the
// engine and a durable gcra on a memory store, 100,000 client addresses,
// the clock standing still. "off": no max_delay; "on, at once": max_delay
// set, the burst never spent, so no request waits; "on, waits": burst 1,
// so every request after a key's first waits for its turn, through a Sleep
// that returns at once (the bookkeeping of a wait, not the wait).
func BenchmarkMaxDelay(b *testing.B) {
	for _, bc := range []struct{ name, fields string }{
		{"off", ""},
		{"on, at once", "max_delay: 30s, "},
		{"on, waits", "burst: 1, max_delay: 30s, "},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f, err := policy.Parse("bench.yaml", []byte("version: 1\npolicies:\n  - {name: g, routes: [\"GET /g\"], key: ip, strategy: durable, algorithm: gcra, "+
				bc.fields+"limit: 1000000000000, window: 1h}\n"))
			if err != nil {
				b.Fatal(err)
			}
			store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
			waits := 0
			e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Now:    func() time.Time { return limitertest.T0 },
				Sleep:  func(context.Context, time.Duration) error { waits++; return nil },
				Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
					return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
				}})
			if err != nil {
				b.Fatal(err)
			}
			ips := make([]string, 100_000)
			for i := range ips {
				ips[i] = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
			}
			in := &edgelimit.Input{Method: "GET", Path: "/g"}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				in.SourceIP = ips[i%len(ips)]
				v := e.Decide(context.Background(), in)
				if !v.Allowed {
					b.Fatal(v.Status)
				}
				v.Release()
			}
			b.ReportMetric(float64(waits)/float64(b.N), "waits/op")
		})
	}
}
