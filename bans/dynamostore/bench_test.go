package dynamostore_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/bans"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/internal/banrule"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	ddbsetup "github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
)

// floodCases are what a ban costs and saves: one API key flooding a
// durable fixed window (limit 1 a day, spent before the run) with
// requests that are all refused, without a ban (the durable deny cache on,
// and off), with a ban that the run never reaches (each denial counted),
// and banned (deny cache on, and off: a ban is answered before the
// limiters either way).
var floodCases = []struct {
	name, fields string
	banned       bool
}{
	{"denied", "", false},
	{"denied, deny_cache off", "deny_cache: false, ", false},
	{"denied, counted toward a ban", "ban: {after: 1000000, within: 24h, for: 24h}, ", false},
	{"banned", "ban: {after: 3, within: 24h, for: 24h, max: 24h}, ", true},
	{"banned, deny_cache off", "deny_cache: false, ban: {after: 3, within: 24h, for: 24h, max: 24h}, ", true},
}

func floodPolicies(b *testing.B, fields string) *policy.File {
	b.Helper()
	f, err := policy.Parse("flood.yaml", []byte(`version: 1
policies:
  - {name: api, routes: ["GET /v"], key: header:X-Api-Key, strategy: durable, algorithm: fixed-window, `+fields+`limit: 1, window: 24h, store_timeout: 10s}
`))
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// floodClock is the engines' clock: it stands still but for the loop,
// which moves it 1 ms a request (a flood of 1,000 requests a second), so
// that each instance re-reads a ban it knows every ban.staleness (5s),
// 5,000 requests apart.
type floodClock struct{ ns atomic.Int64 }

func (c *floodClock) Now() time.Time { return limitertest.T0.Add(time.Duration(c.ns.Load())) }
func (c *floodClock) tick()          { c.ns.Add(int64(time.Millisecond)) }

func floodInput() *edgelimit.Input {
	return &edgelimit.Input{Method: "GET", Path: "/v", Header: limitertest.Headers(map[string]string{"X-Api-Key": "hammer"})}
}

// warm spends the key's quota and, for a banned case, gets it banned.
func warm(b *testing.B, e *edgelimit.Engine, banned bool) {
	b.Helper()
	for i := 0; ; i++ {
		v := e.Decide(context.Background(), floodInput())
		done := !v.Allowed && (!banned || bytes.Contains(v.Body, []byte(`"ban":`)))
		v.Release()
		if done {
			return
		}
		if i > 10 {
			b.Fatal("the key was not refused (or banned) after 10 requests")
		}
	}
}

func decide(b *testing.B, e *edgelimit.Engine, in *edgelimit.Input, banned bool) {
	v := e.Decide(context.Background(), in)
	if v.Allowed || v.Status != 429 || banned != bytes.Contains(v.Body, []byte(`"ban":`)) {
		b.Fatalf("status %d, body %s; want a 429 (banned: %v)", v.Status, v.Body, banned)
	}
	v.Release()
}

// countingBans counts the calls the engine makes of its ban store.
type countingBans struct {
	edgelimit.BanStore
	reads, counts atomic.Int64
}

func (c *countingBans) ReadBan(ctx context.Context, k banrule.Key) (banrule.State, error) {
	c.reads.Add(1)
	return c.BanStore.ReadBan(ctx, k)
}

func (c *countingBans) CountDenial(ctx context.Context, k banrule.Key, r banrule.Rule, t time.Time) (banrule.Outcome, error) {
	c.counts.Add(1)
	return c.BanStore.CountDenial(ctx, k, r, t)
}

// BenchmarkBannedKeyMemory: a banned key's decision against an ordinary
// denial's, on one engine with the memory stores (the decision's own
// cost, no network), with the calls the engine makes of its ban store.
//
//	go test -run '^$' -bench BenchmarkBannedKeyMemory -benchmem ./bans/dynamostore/
func BenchmarkBannedKeyMemory(b *testing.B) {
	for _, bc := range floodCases {
		b.Run(bc.name, func(b *testing.B) {
			f := floodPolicies(b, bc.fields)
			clock := &floodClock{}
			store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
			counted := &countingBans{BanStore: bans.NewMemory(clock.Now)}
			e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock.Now, Bans: counted,
				Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
					return durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: clock.Now})
				}})
			if err != nil {
				b.Fatal(err)
			}
			warm(b, e, bc.banned)
			counted.reads.Store(0)
			counted.counts.Store(0)
			in := floodInput()
			b.ReportAllocs()
			for b.Loop() {
				clock.tick()
				decide(b, e, in, bc.banned)
			}
			b.ReportMetric(float64(counted.reads.Load())/float64(b.N), "ban-reads/op")
			b.ReportMetric(float64(counted.counts.Load())/float64(b.N), "ban-counts/op")
		})
	}
}

// BenchmarkBannedKeyDynalite: the same flood on two engines (two
// instances) sharing one table on dynalite, 64 goroutines, counting every
// DynamoDB call both make (the SDK's operations, ddbtest.Counter) per
// request: what a banned key costs the table against a key that is only
// refused.
//
//	go run ./internal/tools/testservers -- go test -run '^$' -bench BenchmarkBannedKeyDynalite -benchtime 5000x ./bans/dynamostore/
func BenchmarkBannedKeyDynalite(b *testing.B) {
	srv := ddbtest.Servers(b)[0]
	for _, bc := range floodCases {
		b.Run(bc.name, func(b *testing.B) {
			f := floodPolicies(b, bc.fields)
			clock := &floodClock{}
			c1, table, n1 := ddbtest.Table(b, srv)
			c2, n2 := ddbtest.Client(b, srv)
			var engines []*edgelimit.Engine
			for _, c := range []ddbsetup.Config{{Client: c1, Table: table}, {Client: c2, Table: table}} {
				env := setup.BackendEnv{Getenv: func(string) string { return "" }, Now: clock.Now}
				build, err := setup.Limiters(f, []setup.Backend{durable.Backend(c)}, env)
				if err != nil {
					b.Fatal(err)
				}
				store, err := setup.Bans(f, []setup.Backend{durable.Backend(c)}, env)
				if err != nil {
					b.Fatal(err)
				}
				e, err := edgelimit.New(edgelimit.Config{Policies: f, Limiters: build, Bans: store, Now: clock.Now,
					HashSecret: []byte(strings.Repeat("k", 32)), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					b.Fatal(err)
				}
				engines = append(engines, e)
			}
			warm(b, engines[0], bc.banned)
			// The other instance learns of the key by its own requests.
			n1.Reset()
			n2.Reset()
			b.SetParallelism(32) // 64 goroutines on 2 cores
			var next atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				in := floodInput()
				for pb.Next() {
					clock.tick()
					decide(b, engines[next.Add(1)%2], in, bc.banned)
				}
			})
			b.StopTimer()
			for _, op := range []string{"GetItem", "UpdateItem", "BatchGetItem", "TransactWriteItems"} {
				if n := n1.Op(op) + n2.Op(op); n > 0 {
					b.ReportMetric(float64(n)/float64(b.N), op+"/op")
				}
			}
			b.ReportMetric(float64(n1.Total()+n2.Total())/float64(b.N), "calls/op")
		})
	}
}
