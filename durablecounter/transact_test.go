package durablecounter_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// txBackends returns the memory store and every real server that has
// transactions, as named store constructors; dynalite, which lacks
// TransactWriteItems, is skipped with a message saying so.
func txBackends(t *testing.T) map[string]func(t *testing.T) (durablecounter.Store, *ddbtest.Counter) {
	t.Helper()
	out := map[string]func(t *testing.T) (durablecounter.Store, *ddbtest.Counter){
		"memory": func(t *testing.T) (durablecounter.Store, *ddbtest.Counter) {
			return durablecounter.NewMemory(durablecounter.MemoryConfig{}), nil
		},
	}
	var servers []ddbtest.Server
	t.Run("servers", func(t *testing.T) { servers = ddbtest.Servers(t) }) // skips only itself
	for _, s := range servers {
		if !s.Transactions {
			t.Logf("%s lacks TransactWriteItems: its batches take the sequential fallback, tested by TestConformanceDynamo and TestSequentialBatchDynamo", s.Name)
			continue
		}
		out[s.Name] = func(t *testing.T) (durablecounter.Store, *ddbtest.Counter) {
			client, table, calls := ddbtest.Table(t, s)
			store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table, Transactions: dynamostore.TransactionsRequired})
			if err != nil {
				t.Fatal(err)
			}
			return store, calls
		}
	}
	return out
}

// TestBatchAcrossAlgorithms: one request guarded by four durable policies,
// one of each algorithm (a per-key burst, a daily quota, a per-IP limit and
// an exact audit log), is committed with one TransactWriteItems: all or
// nothing, and a denial names every violated policy and spends nothing of
// the others.
func TestBatchAcrossAlgorithms(t *testing.T) {
	t.Parallel()
	for name, newStore := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, calls := newStore(t)
			clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour).Add(time.Hour))
			mk := func(name, alg string, limit int64, window time.Duration, burst int64) *durablecounter.Counter {
				c, err := durablecounter.New(durablecounter.Config{
					Policy: &policy.Policy{Name: name, Limit: limit, Window: window, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), Burst: burst}},
					Store:  store, Now: clock.Now,
				})
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			burst := mk("burst", string(durablecounter.GCRA), 10, 10*time.Second, 3) // one a second, 3 at once
			daily := mk("daily", string(durablecounter.FixedWindow), 1000, 24*time.Hour, 0)
			perIP := mk("per-ip", string(durablecounter.SlidingWindow), 5, time.Minute, 0)
			audit := mk("audit", string(durablecounter.SlidingLog), 4, time.Minute, 0)
			items := []edgelimit.BatchItem{
				{Limiter: burst, Request: edgelimit.Request{Key: "api-key"}},
				{Limiter: daily, Request: edgelimit.Request{Key: "api-key"}},
				{Limiter: perIP, Request: edgelimit.Request{Key: "203.0.113.7"}},
				{Limiter: audit, Request: edgelimit.Request{Key: "api-key"}},
			}
			type want struct {
				violated  []string
				remaining [4]int64
			}
			step := func(label string, w want) {
				t.Helper()
				if calls != nil {
					calls.Reset()
				}
				ds, err := burst.AllowBatch(context.Background(), items)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				var violated []string
				var remaining [4]int64
				for i, d := range ds {
					if !d.Allowed {
						violated = append(violated, d.Policy)
					}
					remaining[i] = d.Remaining
				}
				if !slices.Equal(violated, w.violated) || remaining != w.remaining {
					t.Errorf("%s: violated %q, remaining %v; want %q, %v", label, violated, remaining, w.violated, w.remaining)
				}
				if calls != nil {
					if n := calls.Op("TransactWriteItems"); n != 1 {
						t.Errorf("%s: %d TransactWriteItems, want 1 (%v)", label, n, calls.Snapshot())
					}
				}
			}
			step("batch 1", want{nil, [4]int64{2, 999, 4, 3}})
			step("batch 2", want{nil, [4]int64{1, 998, 3, 2}})
			step("batch 3", want{nil, [4]int64{0, 997, 2, 1}})
			// The burst is spent: denied, and the others keep their quota.
			step("batch 4, burst spent", want{[]string{"burst"}, [4]int64{0, 997, 2, 1}})
			clock.Advance(time.Second) // one unit of burst drips back
			step("batch 5", want{nil, [4]int64{0, 996, 1, 0}})
			// Now the audit log is full too: both are named.
			step("batch 6, burst and audit spent", want{[]string{"burst", "audit"}, [4]int64{0, 996, 1, 0}})
			clock.Advance(2 * time.Second)
			step("batch 7, audit spent", want{[]string{"audit"}, [4]int64{2, 996, 1, 0}})
		})
	}
}

// TestEngineAcrossAlgorithms runs durable policies of every algorithm on
// one route through the engine, as a Lambda function would: they are
// batched (one store), the 429 names every violated policy, and the
// RateLimit header carries each policy's quota.
func TestEngineAcrossAlgorithms(t *testing.T) {
	t.Parallel()
	// store_timeout 30s: moto is shared with tests that keep it busy, and
	// this test is about the answers, not the budget (fault_test.go is).
	file, err := policy.Parse("test.yaml", []byte(`version: 1
policies:
  - {name: burst, routes: ["GET /paid/*"], key: header:X-Api-Key, strategy: durable, algorithm: gcra, limit: 10, window: 10s, burst: 2, store_timeout: 30s}
  - {name: daily, routes: ["GET /paid/*"], key: header:X-Api-Key, strategy: durable, algorithm: fixed-window, limit: 1000, window: 1d, store_timeout: 30s}
  - {name: per-ip, routes: ["GET /paid/*"], key: ip, strategy: durable, algorithm: sliding-window, limit: 2, window: 1m, store_timeout: 30s}
  - {name: audit, routes: ["GET /paid/*"], key: header:X-Api-Key, strategy: durable, algorithm: sliding-log, limit: 5, window: 1m, store_timeout: 30s}
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, newStore := range txBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, _ := newStore(t)
			clock := limitertest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
			e, err := edgelimit.New(edgelimit.Config{
				Policies:   file,
				HashSecret: []byte(strings.Repeat("s", 32)),
				Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
				Now:        clock.Now,
				Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
					return durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: clock.Now})
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			do := func() *edgelimit.Verdict {
				return e.Decide(context.Background(), &edgelimit.Input{
					Method: "GET", Path: "/paid/report", SourceIP: "203.0.113.7",
					Header: limitertest.Headers{"x-api-key": "key-1"},
				})
			}
			for i := range 2 {
				if v := do(); !v.Allowed {
					t.Fatalf("request %d: %d %s", i+1, v.Status, v.Body)
				}
			}
			v := do()
			var p limitertest.Problem
			if err := json.Unmarshal(v.Body, &p); err != nil || v.Status != 429 {
				t.Fatalf("third request: %d %s (%v), want 429", v.Status, v.Body, err)
			}
			if want := []string{"burst", "per-ip"}; !slices.Equal(p.ViolatedPolicies, want) {
				t.Errorf("violated-policies = %q, want %q", p.ViolatedPolicies, want)
			}
			var rateLimit, retryAfter string
			for _, f := range v.Header() {
				switch f.Name {
				case "RateLimit":
					rateLimit = f.Value
				case "Retry-After":
					retryAfter = f.Value
				}
			}
			// per-ip's 2 requests weigh 2*(1-f) in the next minute: room for
			// one more at 12:01:30.
			if retryAfter != "90" {
				t.Errorf("Retry-After = %q, want 90", retryAfter)
			}
			// Nothing of daily or audit was spent by the denied request. t
			// is each policy's effective window (issue #10): burst's next
			// unit in 1 s, per-ip's estimate falls by one at 12:01:30 (its
			// Retry-After), audit's oldest units leave at 12:01:00.
			if want := `"burst";r=0;t=1, "daily";r=998;t=43200, "per-ip";r=0;t=90, "audit";r=3;t=60`; rateLimit != want {
				t.Errorf("RateLimit of the 429 = %q, want %q", rateLimit, want)
			}
		})
	}
}
