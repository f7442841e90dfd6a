package kvbucket_test

import (
	"testing"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/kvbucket/dynamostore"
	"github.com/edgelimit/edgelimit/limitertest"
)

// The conformance suite on kv (issue #11, item 8): the parts that apply to
// a soft limiter, on one instance, where it is exactly a token bucket:
// the step tables, the randomised comparison with the reference model
// (limitertest.TokenBucket: the exact rate, and a refund that gives back
// what of a spend refill has not brought back), costs, limit 0, refunds by
// receipt, peeks, and 64 goroutines against one key and against 1,000
// keys. Not batches: kv has no atomic batch. What several instances admit
// together is kv's bound (TestOverAdmission*, TestConcurrentBurstIsExact*).

var kvOptions = limitertest.Options{Algorithm: limitertest.TokenBucket, Refund: true, Peek: true, Concurrency: true}

func buckets(kv kvbucket.KV, noCache bool) limitertest.NewLimiter {
	return func(s limitertest.Spec) (edgelimit.Limiter, error) {
		return kvbucket.New(kvbucket.Config{Policy: s.Policy, KV: kv, Now: s.Now, NoCache: noCache,
			Options: &kvbucket.Options{Burst: s.Burst}})
	}
}

// TestConformanceMemory runs the suite on the memory KV, with the cache
// (a key's first sync interval reserves each admission, later ones spend
// from the instance's share, which alone is the whole bucket) and without.
func TestConformanceMemory(t *testing.T) {
	t.Parallel()
	for _, noCache := range []bool{false, true} {
		name := map[bool]string{false: "Cached", true: "NoCache"}[noCache]
		t.Run(name, func(t *testing.T) {
			limitertest.Run(t, func(t *testing.T) limitertest.NewLimiter {
				return buckets(kvbucket.NewMemory(kvbucket.MemoryConfig{}), noCache)
			}, kvOptions)
		})
	}
}

// TestConformanceDynamo runs the suite on dynamostore against each real
// server, each test on its own table. moto answers one call at a time:
// there the randomised comparison is shortened (Quick); the one-key claim
// runs in full everywhere.
func TestConformanceDynamo(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		opts := kvOptions
		opts.Quick = s.Name == "moto"
		limitertest.Run(t, func(t *testing.T) limitertest.NewLimiter {
			client, table, _ := ddbtest.Table(t, s)
			store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return buckets(store, false)
		}, opts)
	})
}
