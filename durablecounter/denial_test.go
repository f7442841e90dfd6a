package durablecounter_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// TestDenialExplainsItself: a denial reports Remaining, Reset and
// RetryAfter computed from the state that denied it. On moto that state
// comes with the failed UpdateItem (ReturnValuesOnConditionCheckFailure =
// ALL_OLD): one call. dynalite ignores ALL_OLD, so the store reads the item
// (one consistent GetItem more). Both answers equal the memory store's.
func TestDenialExplainsItself(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		client, table, calls := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		mem := durablecounter.NewMemory(durablecounter.MemoryConfig{})
		for _, alg := range allAlgorithms {
			clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Minute).Add(90 * time.Second))
			p := &policy.Policy{Name: "explain-" + alg, Limit: 5, Window: time.Minute, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg)}}
			c, err := durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := durablecounter.New(durablecounter.Config{Policy: p, Store: mem, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			both := func(cost int64) (got, want edgelimit.Decision) {
				t.Helper()
				req := edgelimit.Request{Key: "k", Cost: cost}
				got, err := c.Allow(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if want, err = ref.Allow(context.Background(), req); err != nil {
					t.Fatal(err)
				}
				return got, want
			}
			both(4)
			clock.Advance(10 * time.Second)
			calls.Reset()
			got, want := both(2) // 1 left
			if got != want || got.Allowed || got.Remaining != 1 || got.RetryAfter <= 0 {
				t.Errorf("%s on %s: denial = %+v, want %+v (denied, Remaining 1)", alg, s.Name, got, want)
			}
			wantCalls := map[string]int{"UpdateItem": 1}
			if !s.OldOnConditionFailure {
				wantCalls["GetItem"] = 1
			}
			if snap := calls.Snapshot(); len(snap) != len(wantCalls) || snap["UpdateItem"] != wantCalls["UpdateItem"] || snap["GetItem"] != wantCalls["GetItem"] {
				t.Errorf("%s on %s: calls %v for a denial, want %v", alg, s.Name, snap, wantCalls)
			}
		}
	})
}

// TestTwoInstances: two Lambda instances (two DynamoStores, each with its
// own views of the items) share one table and decide one key's requests in
// turn, with the same clock. Each instance's view is out of date whenever
// the other wrote last, which the condition catches; every decision must
// still equal the one a single memory store makes for the same sequence.
// The calls per decision show the cost of out-of-date views.
func TestTwoInstances(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		steps := 200
		if s.Name == "moto" {
			steps = 30 // moto answers one call at a time, in ~10 ms
		}
		client, table, calls := ddbtest.Table(t, s)
		for _, alg := range allAlgorithms {
			clock := limitertest.NewClock(limitertest.T0)
			p := &policy.Policy{Name: "two-" + alg, Limit: 6, Window: 10 * time.Second, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg)}}
			var instances [2]*durablecounter.Counter
			for i := range instances {
				store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
				if err != nil {
					t.Fatal(err)
				}
				if instances[i], err = durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: clock.Now}); err != nil {
					t.Fatal(err)
				}
			}
			ref, err := durablecounter.New(durablecounter.Config{Policy: p, Store: durablecounter.NewMemory(durablecounter.MemoryConfig{}), Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			calls.Reset()
			for step := range steps {
				if rng.IntN(3) != 0 {
					clock.Advance(time.Duration(rng.Int64N(int64(2 * time.Second))))
				}
				req := edgelimit.Request{Key: "k", Cost: 1 + rng.Int64N(3)}
				got, err := instances[rng.IntN(2)].Allow(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := ref.Allow(context.Background(), req)
				// Receipts name the instant alike; the rest (an item's
				// incarnation, a bucket's period) is each store's own.
				got.Receipt, want.Receipt = edgelimit.Receipt{At: got.Receipt.At}, edgelimit.Receipt{At: want.Receipt.At}
				if got != want {
					t.Fatalf("%s on %s, step %d: Allow(cost %d) = %+v, want %+v", alg, s.Name, step, req.Cost, got, want)
				}
			}
			t.Logf("%s on %s: %.2f calls per decision for two instances taking turns at random (%v)", alg, s.Name, float64(calls.Total())/float64(steps), calls.Snapshot())
			calls.Reset()
		}
	})
}
