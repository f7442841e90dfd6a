package durablecounter_test

import (
	"testing"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
)

// allAlgorithms are the algorithms of strategy durable.
var allAlgorithms = []string{
	string(durablecounter.FixedWindow),
	string(durablecounter.SlidingWindow),
	string(durablecounter.SlidingLog),
	string(durablecounter.GCRA),
}

func capabilities(alg string) limitertest.Options {
	return limitertest.Options{Algorithm: alg, Batch: true, Refund: true, Peek: true, Concurrency: true}
}

func counters(store durablecounter.Store) limitertest.NewLimiter {
	return func(s limitertest.Spec) (edgelimit.Limiter, error) {
		return durablecounter.New(durablecounter.Config{Policy: s.Policy, Store: store, Now: s.Now,
			Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(s.Algorithm), Burst: s.Burst, DenyCache: s.DenyCache}})
	}
}

// forEachAlgorithm runs f for every algorithm, one after the other.
//
// On scheduling: go test runs at most -parallel (default GOMAXPROCS, 2 on
// our machines) parallel tests at once. The tests that need the servers are
// parallel at the top level and per server, and run the algorithms one
// after the other within a server: moto answers one call at a time, so its
// tests make one long lane that keeps it busy, while the other lane runs
// dynalite's and the memory store's.
func forEachAlgorithm(t *testing.T, f func(t *testing.T, alg string)) {
	t.Helper()
	for _, alg := range allAlgorithms {
		t.Run(alg, func(t *testing.T) { f(t, alg) })
	}
}

// TestConformanceMemory runs the suite on the memory store, without and
// with the deny cache (which must not change any decision).
func TestConformanceMemory(t *testing.T) {
	t.Parallel()
	forEachAlgorithm(t, func(t *testing.T, alg string) {
		for _, deny := range []bool{false, true} {
			opts := capabilities(alg)
			opts.DenyCache = deny
			name := map[bool]string{false: "NoDenyCache", true: "DenyCache"}[deny]
			t.Run(name, func(t *testing.T) {
				limitertest.Run(t, func(t *testing.T) limitertest.NewLimiter {
					return counters(durablecounter.NewMemory(durablecounter.MemoryConfig{}))
				}, opts)
			})
		}
	})
}

// TestConformanceMemoryOneShard runs the suite on a single-lock store, so
// that batches and sweeps meet every key in one shard.
func TestConformanceMemoryOneShard(t *testing.T) {
	t.Parallel()
	forEachAlgorithm(t, func(t *testing.T, alg string) {
		limitertest.Run(t, func(t *testing.T) limitertest.NewLimiter {
			return counters(durablecounter.NewMemory(durablecounter.MemoryConfig{Shards: 1}))
		}, capabilities(alg))
	})
}

// TestConformanceDynamo runs the suite against each real server, each test
// on its own table, with full client concurrency. (moto's DynamoDB backend
// is not atomic per item under concurrent requests — it admitted 1,026 of a
// limit of 1,000 — so the test-server runner serves moto behind a lock; see
// internal/tools/testservers/moto_serialized.py.) On dynalite batches take
// the sequential fallback (TransactionsAuto detects the missing
// TransactWriteItems); on moto they are transactions.
//
// moto answers one call at a time, in about 10 ms: the concurrency claims
// run there with the deny cache on (the default of a policy file), at the
// sizes of limitertest.Options.Serialized (a quarter: a serialized server
// gives them no interleaving that a larger size would add, and the moto
// lane is the package's longest), and the randomised model comparison is
// shortened. dynalite runs every
// test in full and without the deny cache, so that every denial reaches
// the server.
func TestConformanceDynamo(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel() // the servers are separate processes
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			opts := capabilities(alg)
			if s.Name == "moto" {
				opts.DenyCache, opts.Quick, opts.Serialized = true, true, true
			}
			limitertest.Run(t, func(t *testing.T) limitertest.NewLimiter {
				return counters(dynamoStore(t, s, dynamostore.TransactionsAuto))
			}, opts)
		})
	})
}

// TestSequentialBatchDynamo shows the batch fallback all or nothing on the
// server that has transactions too (on dynalite TestConformanceDynamo
// already runs it, concurrent batches included).
func TestSequentialBatchDynamo(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		if !s.Transactions {
			t.Skipf("%s has no transactions: TestConformanceDynamo runs the sequential fallback there", s.Name)
		}
		t.Parallel()
		// The fallback is the same protocol for every algorithm (their
		// updates and refunds); dynalite runs it for all four, concurrent
		// batches included. Here: the two whose refunds differ most.
		for _, alg := range []string{string(durablecounter.FixedWindow), string(durablecounter.SlidingLog)} {
			t.Run(alg, func(t *testing.T) {
				opts := capabilities(alg)
				opts.Concurrency = false
				limitertest.RunBatch(t, func(t *testing.T) limitertest.NewLimiter {
					return counters(dynamoStore(t, s, dynamostore.TransactionsOff))
				}, opts)
			})
		}
	})
}

func dynamoStore(t *testing.T, s ddbtest.Server, mode dynamostore.TransactionMode) *dynamostore.Store {
	t.Helper()
	client, table, _ := ddbtest.Table(t, s)
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table, Transactions: mode})
	if err != nil {
		t.Fatalf("dynamostore.New: %v", err)
	}
	return store
}
