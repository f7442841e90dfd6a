package durablecounter_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
)

// TestDynamoCallsPerDecision counts the HTTP requests the SDK sends to each
// real server: one UpdateItem per decision, allowed or denied, for cost 1;
// a denial of cost > 1 adds one consistent GetItem on dynalite only (it
// ignores ReturnValuesOnConditionCheckFailure); a refund is one UpdateItem;
// a batch is one TransactWriteItems plus one BatchGetItem (the counts for
// the headers) on moto, and on dynalite, after one detecting
// TransactWriteItems, one UpdateItem per member.
func TestDynamoCallsPerDecision(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		client, table, calls := ddbtest.Table(t, s)
		store, err := durablecounter.NewDynamoStore(durablecounter.DynamoConfig{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		clock := limitertest.NewClock(limitertest.T0)
		counter := func(name string, limit int64) *durablecounter.Counter {
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &edgelimit.Policy{Name: name, Limit: limit, Window: time.Hour}, Store: store, Now: clock.Now,
			})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		ctx := context.Background()
		expect := func(what string, want map[string]int) {
			t.Helper()
			got := calls.Snapshot()
			total := 0
			for _, n := range want {
				total += n
			}
			for op, n := range want {
				if got[op] != n {
					t.Errorf("%s: %d %s calls, want %d (all calls: %v)", what, got[op], op, n, got)
				}
			}
			if int(calls.Total()) != total {
				t.Errorf("%s: %d calls in all, want %d (%v)", what, calls.Total(), total, got)
			}
			t.Logf("%s: %v", what, got)
			calls.Reset()
		}

		c := counter("calls", 3)
		allowed, denied := 0, 0
		for range 10 {
			d, err := c.Allow(ctx, edgelimit.Request{Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			} else {
				denied++
			}
		}
		if allowed != 3 || denied != 7 {
			t.Errorf("allowed %d, denied %d; want 3 and 7", allowed, denied)
		}
		expect("10 decisions of cost 1 (3 allowed, 7 denied)", map[string]int{"UpdateItem": 10})

		if d, err := c.Allow(ctx, edgelimit.Request{Key: "k2", Cost: 2}); err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("Allow(cost 2) = %+v, %v", d, err)
		}
		expect("an allowed decision of cost 2", map[string]int{"UpdateItem": 1})
		if d, err := c.Allow(ctx, edgelimit.Request{Key: "k2", Cost: 2}); err != nil || d.Allowed || d.Remaining != 1 {
			t.Fatalf("Allow(cost 2) with 1 left = %+v, %v; want denied with Remaining 1", d, err)
		}
		if s.OldOnConditionFailure {
			expect("a denial of cost 2 (ALL_OLD honoured)", map[string]int{"UpdateItem": 1})
		} else {
			expect("a denial of cost 2 (ALL_OLD ignored: one consistent read)", map[string]int{"UpdateItem": 1, "GetItem": 1})
		}

		if err := c.Refund(ctx, edgelimit.Request{Key: "k2", Cost: 2}); err != nil {
			t.Fatal(err)
		}
		expect("a refund", map[string]int{"UpdateItem": 1})

		a, b := counter("batch-a", 10), counter("batch-b", 1)
		items := []edgelimit.BatchItem{
			{Limiter: a, Request: edgelimit.Request{Key: "k"}},
			{Limiter: b, Request: edgelimit.Request{Key: "k"}},
		}
		for i, wantAllowed := range []bool{true, false, false} {
			ds, err := a.AllowBatch(ctx, items)
			if err != nil {
				t.Fatal(err)
			}
			if got := ds[0].Allowed && ds[1].Allowed; got != wantAllowed {
				t.Fatalf("batch %d: %+v, want allowed %v", i+1, ds, wantAllowed)
			}
			switch {
			case s.Transactions && wantAllowed:
				expect("an allowed batch of 2", map[string]int{"TransactWriteItems": 1, "BatchGetItem": 1})
			case s.Transactions:
				expect("a denied batch of 2", map[string]int{"TransactWriteItems": 1, "BatchGetItem": 1})
			case i == 0:
				expect("the first batch of 2 (detects no transactions)", map[string]int{"TransactWriteItems": 1, "UpdateItem": 2})
			default:
				// a spent, b denied, a given back.
				expect("a denied batch of 2 (sequential fallback)", map[string]int{"UpdateItem": 3})
			}
		}
	})
}
