package durablecounter_test

import (
	"context"
	"fmt"
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

// TestDynamoCallsPerDecision counts the HTTP requests the SDK sends to each
// real server, per decision, for every algorithm and for the two-round-trip
// read-then-write baseline, in the same run, and logs the table that
// docs/durable.md shows:
//
//   - allowed, in the steady state: one UpdateItem, no read before it;
//   - the first denial an instance meets: one UpdateItem whose failure
//     carries the item (ALL_OLD); on dynalite, which ignores ALL_OLD, one
//     consistent GetItem more, except for a fixed window of cost 1;
//   - repeat denials, and the denial after an instance's own admission
//     took the last unit: none, from the deny cache (one each without it);
//   - the baseline: a GetItem and a conditional write per admission, a
//     GetItem per denial.
func TestDynamoCallsPerDecision(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		client, table, calls := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		clock := limitertest.NewClock(limitertest.T0)
		ctx := context.Background()
		measure := func(n int, f func(i int)) float64 {
			t.Helper()
			calls.Reset()
			for i := range n {
				f(i)
			}
			return float64(calls.Total()) / float64(n)
		}
		const limit = 10
		var tab strings.Builder
		fmt.Fprintf(&tab, "%-15s %8s %16s %12s %14s %17s %18s\n", s.Name, "allowed", "after own last", "1st denial", "repeat denial", "repeat, no cache", "new window/refill")
		for _, alg := range allAlgorithms {
			newCounter := func(name string, denyCache bool) *durablecounter.Counter {
				c, err := durablecounter.New(durablecounter.Config{
					Policy: &policy.Policy{Name: name, Limit: limit, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), DenyCache: denyCache}},
					Store:  store, Now: clock.Now,
				})
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			// c spends the quota; other is another instance (its own deny
			// cache) that meets the first denial; noCache has no deny cache.
			c, other, noCache := newCounter(alg+"-calls", true), newCounter(alg+"-calls", true), newCounter(alg+"-calls", false)
			clock.Set(limitertest.WindowStart(limitertest.T0, time.Hour).Add(30 * time.Minute))
			allow := func(c *durablecounter.Counter, what string, allowed bool) {
				t.Helper()
				d, err := c.Allow(ctx, edgelimit.Request{Key: "k"})
				if err != nil {
					t.Fatalf("%s %s: %v", alg, what, err)
				}
				if d.Allowed != allowed {
					t.Fatalf("%s %s: %+v, want allowed %v", alg, what, d, allowed)
				}
			}
			allow(c, "first decision on a new key", true) // also a single call
			allowed := measure(limit-1, func(int) { allow(c, "allowed", true) })
			// The admission that took the last unit left its state in c's
			// deny cache: c's next request is denied without a call.
			afterOwn := measure(1, func(int) { allow(c, "denial after its own last admission", false) })
			first := measure(1, func(int) { allow(other, "first denial", false) })
			repeat := measure(100, func(int) { allow(other, "repeat denial", false) })
			repeatNoCache := measure(5, func(int) { allow(noCache, "repeat denial without the cache", false) })
			// The next window (sliding window: this instance knows the count
			// that now weighs as the previous one) or, for gcra, a refilled
			// unit; the sliding log once the window has moved on.
			clock.Advance(time.Hour)
			next := measure(1, func(int) { allow(c, "after the window moved", true) })
			fmt.Fprintf(&tab, "%-15s %8.2f %16.2f %12.2f %14.2f %17.2f %18.2f\n", alg, allowed, afterOwn, first, repeat, repeatNoCache, next)

			wantDenial := 1.0
			if !s.OldOnConditionFailure && alg != string(durablecounter.FixedWindow) {
				wantDenial = 2 // dynalite: the UpdateItem, then a GetItem
			}
			for _, f := range []struct {
				what      string
				got, want float64
			}{
				{"allowed", allowed, 1},
				{"denial after its own last admission", afterOwn, 0},
				{"first denial", first, wantDenial},
				{"repeat denial", repeat, 0},
				{"repeat denial without the deny cache", repeatNoCache, wantDenial},
				{"first decision after the window moved", next, 1},
			} {
				if f.got != f.want {
					t.Errorf("%s on %s: %s: %.2f calls per decision, want %.0f", alg, s.Name, f.what, f.got, f.want)
				}
			}
		}

		base := &readThenWrite{client: client, table: table, limit: limit, window: time.Hour, now: clock.Now}
		decideBase := func(allowed bool) func(int) {
			return func(int) {
				d, err := base.decide(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed != allowed {
					t.Fatalf("baseline: %+v, want allowed %v", d, allowed)
				}
			}
		}
		bAllowed := measure(limit, decideBase(true))
		bDenied := measure(5, decideBase(false))
		fmt.Fprintf(&tab, "%-15s %8.2f %16.2f %12.2f %14.2f %17.2f %18s\n", "read-then-write", bAllowed, bDenied, bDenied, bDenied, bDenied, "-")
		if bAllowed != 2 || bDenied != 1 {
			t.Errorf("baseline: %.2f calls per admission and %.2f per denial, want 2 and 1", bAllowed, bDenied)
		}
		t.Logf("DynamoDB calls per decision (%s):\n%s", s.Name, tab.String())
	})
}

// TestDynamoCallsRefundAndBatch pins the calls of the fixed window's
// refund and batches: a refund is one UpdateItem; a batch is one
// TransactWriteItems plus one BatchGetItem (the counts for the headers) on
// moto, and on dynalite, after one detecting TransactWriteItems, one
// UpdateItem per member.
func TestDynamoCallsRefundAndBatch(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		client, table, calls := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		clock := limitertest.NewClock(limitertest.T0)
		counter := func(name string, limit int64) *durablecounter.Counter {
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &policy.Policy{Name: name, Limit: limit, Window: time.Hour}, Store: store, Now: clock.Now,
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
			calls.Reset()
		}

		c := counter("calls", 3)
		spent, err := c.Allow(ctx, edgelimit.Request{Key: "k2", Cost: 2})
		if err != nil || !spent.Allowed || spent.Remaining != 1 {
			t.Fatalf("Allow(cost 2) = %+v, %v", spent, err)
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
		if err := c.Refund(ctx, edgelimit.Request{Key: "k2", Cost: 2}, spent); err != nil {
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

// TestDynamoCallsPerPeek pins what Peek and Refund cost on each server and
// algorithm: a peek is one consistent GetItem, or none when the deny cache
// proves the denial, and a read that shows a denial is remembered, so a
// repeat peek of a denied key is free; a peek that finds room is answered
// from that read for PeekFreshness, then reads again; a sharded policy's
// peek is one BatchGetItem. A refund as of its decision's instant (the
// engine's case) is one UpdateItem.
func TestDynamoCallsPerPeek(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		client, table, calls := ddbtest.Table(t, s)
		ctx := context.Background()
		clock := limitertest.NewClock(limitertest.T0)
		for _, alg := range allAlgorithms {
			t.Run(alg, func(t *testing.T) {
				p := &policy.Policy{Name: "peek", Limit: 2, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), DenyCache: true}}
				instance := func(p *policy.Policy) *durablecounter.Counter {
					store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
					if err != nil {
						t.Fatal(err)
					}
					c, err := durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: clock.Now})
					if err != nil {
						t.Fatal(err)
					}
					return c
				}
				expect := func(what string, want map[string]int) {
					t.Helper()
					got, total := calls.Snapshot(), 0
					for op, n := range want {
						total += n
						if got[op] != n {
							t.Errorf("%s: %d %s calls, want %d (all: %v)", what, got[op], op, n, got)
						}
					}
					if int(calls.Total()) != total {
						t.Errorf("%s: %d calls in all, want %d (%v)", what, calls.Total(), total, got)
					}
					calls.Reset()
				}
				peek := func(c *durablecounter.Counter, wantAllowed bool) {
					t.Helper()
					d, err := c.Peek(ctx, edgelimit.Request{Key: alg})
					if err != nil || d.Allowed != wantAllowed {
						t.Fatalf("Peek = %+v, %v; want allowed %v", d, err, wantAllowed)
					}
				}
				a, b := instance(p), instance(p)
				calls.Reset()
				peek(a, true)
				expect("first peek with room", map[string]int{"GetItem": 1})
				for i := range 3 {
					peek(a, true)
					expect(fmt.Sprintf("repeat peek %d with room, within PeekFreshness", i+1), map[string]int{})
				}
				clock.Advance(durablecounter.PeekFreshness)
				peek(a, true)
				expect("peek with room after PeekFreshness", map[string]int{"GetItem": 1})
				d, err := a.Allow(ctx, edgelimit.Request{Key: alg})
				if err != nil || !d.Allowed {
					t.Fatal(d, err)
				}
				calls.Reset()
				if err := a.Refund(ctx, edgelimit.Request{Key: alg}, d); err != nil {
					t.Fatal(err)
				}
				expect("a refund as of its decision's instant", map[string]int{"UpdateItem": 1})
				for range 2 {
					if _, err := a.Allow(ctx, edgelimit.Request{Key: alg}); err != nil {
						t.Fatal(err)
					}
				}
				calls.Reset()
				peek(a, false) // the admission that took the last unit is remembered
				expect("peek after this instance's admission took the last unit", map[string]int{})
				peek(b, false)
				expect("another instance's first peek of the denied key", map[string]int{"GetItem": 1})
				for i := range 3 {
					peek(b, false)
					expect(fmt.Sprintf("repeat peek %d of the denied key", i+1), map[string]int{})
				}
				sp, so := *p, *opts(p)
				sp.Name, sp.Limit, so.Shards, sp.Options = "peek-sharded", 8, 4, &so
				sharded := instance(&sp)
				calls.Reset()
				peek(sharded, true)
				expect("peek of a policy over 4 shards", map[string]int{"BatchGetItem": 1})
			})
		}
	})
}

// TestDynamoCallsWithGrants counts what grants cost, on each server and
// algorithm. A policy without overrides: true takes no grants and pays
// nothing for them (the tests above). A managed one (overrides: true)
// pays, for a key without a grant, one GetItem of the policy's grant
// marker per DenyCacheMaxAge per instance on the way to a denial (shared
// by every key of the policy); an allowed request is still one
// UpdateItem. A request the grant pays costs one UpdateItem of the grant
// once the quota's denial is cached (the quota's own call before).
func TestDynamoCallsWithGrants(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		client, table, calls := ddbtest.Table(t, s)
		ctx := context.Background()
		clock := limitertest.NewClock(limitertest.T0)
		var tab strings.Builder
		fmt.Fprintf(&tab, "%-15s %8s %17s %19s %14s %17s %16s\n", s.Name, "allowed", "after own last", "other's 1st denial", "repeat denial", "next key denial", "paid by a grant")
		for _, alg := range allAlgorithms {
			t.Run(alg, func(t *testing.T) {
				p := &policy.Policy{Name: "managed-" + alg, Limit: 2, Window: time.Hour, Overrides: true,
					Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), DenyCache: true}}
				instance := func() *durablecounter.Counter {
					store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
					if err != nil {
						t.Fatal(err)
					}
					c, err := durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: clock.Now})
					if err != nil {
						t.Fatal(err)
					}
					return c
				}
				a, b := instance(), instance()
				measure := func(what string, c *durablecounter.Counter, key string, allowed bool) (int64, map[string]int) {
					t.Helper()
					calls.Reset()
					d, err := c.Allow(ctx, edgelimit.Request{Key: key})
					if err != nil || d.Allowed != allowed {
						t.Fatalf("%s: %+v, %v; want allowed %v", what, d, err, allowed)
					}
					return calls.Total(), calls.Snapshot()
				}
				allowed, _ := measure("the first request", a, "k1", true)
				measure("the second", a, "k1", true)
				// a's admission took the last unit (its deny cache knows); on
				// the way to the denial, a reads the marker once.
				afterOwn, afterOwnOps := measure("a's denial after its own last admission", a, "k1", false)
				// b meets the denial: its UpdateItem (and on dynalite, which
				// ignores ALL_OLD, a GetItem of the item but for a fixed window
				// of cost 1), and b's marker read.
				other, otherOps := measure("b's first denial", b, "k1", false)
				repeat, _ := measure("b's repeat denial", b, "k1", false)
				measure("k2", a, "k2", true)
				measure("k2", a, "k2", true)
				measure("k2 on b", b, "k2", false) // b's marker is fresh: its UpdateItem only
				next, _ := measure("a's denial of another key, the marker fresh", a, "k2", false)
				if err := a.Grant(ctx, edgelimit.Request{Key: "k1"}, 1, time.Time{}); err != nil {
					t.Fatal(err)
				}
				paid, paidOps := measure("a request the grant pays", a, "k1", true)
				fmt.Fprintf(&tab, "%-15s %8d %17d %19d %14d %17d %16d\n", alg, allowed, afterOwn, other, repeat, next, paid)
				wantOther := int64(2)
				if !s.OldOnConditionFailure && alg != string(durablecounter.FixedWindow) {
					wantOther = 3
				}
				for _, f := range []struct {
					what      string
					got, want int64
				}{
					{"allowed", allowed, 1},
					{"a's denial after its own last admission: the marker", afterOwn, 1},
					{"b's first denial: its UpdateItem and the marker", other, wantOther},
					{"repeat denial", repeat, 0},
					{"another key's denial after a's own last admission, the marker fresh", next, 0},
					{"paid by a grant: the grant's UpdateItem", paid, 1},
				} {
					if f.got != f.want {
						t.Errorf("%s: %d calls, want %d", f.what, f.got, f.want)
					}
				}
				if afterOwnOps["GetItem"] != 1 || otherOps["UpdateItem"] != 1 || paidOps["UpdateItem"] != 1 {
					t.Errorf("a's denial made %v (want the marker's GetItem); b's %v (want one UpdateItem); the grant's request %v (want one UpdateItem)", afterOwnOps, otherOps, paidOps)
				}
			})
		}
		t.Log("\n" + tab.String())
	})
}
