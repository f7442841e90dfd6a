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
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// BenchmarkMaxDelay measures what max_delay costs an admitted request: the
// engine and a durable gcra on a memory store, or a kv bucket on a memory
// KV, 100,000 client addresses, the clock standing still. "off": no
// max_delay; "on, at once": max_delay set, the burst never spent, so no
// request waits; "on, waits": burst 1, so every request after a key's
// first waits for its turn, through a Sleep that returns at once (the
// bookkeeping of a wait, not the wait). Every key is met before the
// measured loop; the kv rows decide from the cache, as a hot key does:
// every key is met once in its first sync interval and once after it (its
// share granted) before the clock stops there.
func BenchmarkMaxDelay(b *testing.B) {
	for _, st := range []struct{ name, fields string }{
		{"durable", "strategy: durable, algorithm: gcra, limit: 1000000000000, "},
		{"kv", "strategy: kv, limit: 1000000000, "},
	} {
		for _, bc := range []struct{ name, fields string }{
			{"off", ""},
			{"on, at once", "max_delay: 30s, "},
			{"on, waits", "burst: 1, max_delay: 30s, "},
		} {
			b.Run(st.name+"/"+bc.name, func(b *testing.B) { benchMaxDelay(b, st.fields+bc.fields) })
		}
	}
}

func benchMaxDelay(b *testing.B, fields string) {
	f, err := policy.Parse("bench.yaml", []byte("version: 1\npolicies:\n  - {name: g, routes: [\"GET /g\"], key: ip, "+
		fields+"window: 1h}\n"))
	if err != nil {
		b.Fatal(err)
	}
	clock := limitertest.NewClock(limitertest.T0)
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	kv := kvbucket.NewMemory(kvbucket.MemoryConfig{Now: clock.Now})
	waits := 0
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:    clock.Now,
		Sleep:  func(context.Context, time.Duration) error { waits++; return nil },
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			if p.Strategy == kvbucket.Strategy {
				return kvbucket.New(kvbucket.Config{Policy: p, KV: kv})
			}
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
	decide := func() {
		v := e.Decide(context.Background(), in)
		if !v.Allowed {
			b.Fatal(v.Status)
		}
		v.Release()
	}
	// Every key is met before the loop, so that every request measured
	// finds its key's state (and with burst 1 waits): a durable key once,
	// a kv key in its first sync interval and once after it.
	warm := []time.Duration{0}
	if f.Policies[0].Strategy == kvbucket.Strategy {
		warm = append(warm, 2*kvbucket.DefaultSyncInterval)
	}
	for _, at := range warm {
		clock.Set(limitertest.T0.Add(at))
		for _, ip := range ips {
			in.SourceIP = ip
			decide()
		}
	}
	waits = 0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		in.SourceIP = ips[i%len(ips)]
		decide()
	}
	b.ReportMetric(float64(waits)/float64(b.N), "waits/op")
}
