package dynamostore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/inflight/dynamostore"
	"github.com/edgelimit/edgelimit/inflight/internal/wire"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// TestItemCost pins the item of a holder of several slots: one attribute
// whose name carries its units (h3_<id>), n moved by all of them, and a
// release that moves n back by all of them.
func TestItemCost(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		client, table, _ := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		lim := crashLimiter(t, store, limitertest.NewClock(t0).Now)
		ctx := testCtx(t)
		one, three := edgelimit.Request{Key: "k"}, edgelimit.Request{Key: "k", Cost: 3}
		a, err := lim.Allow(ctx, one)
		if err != nil || !a.Allowed {
			t.Fatal(a, err)
		}
		b, err := lim.Allow(ctx, three)
		if err != nil || !b.Allowed || b.Remaining != 0 {
			t.Fatalf("a take of 3 beside 1 of 4: %+v, %v", b, err)
		}
		item := rawItem(t, client, table, "if#speech#k")
		lease := strconv.FormatInt(t0.Add(crashLease).UnixNano(), 10)
		want := map[string]string{
			"pk": "if#speech#k",
			"n":  "4",
			"h_" + wire.SlotID(a.Receipt.ID).String():  lease,
			"h3_" + wire.SlotID(b.Receipt.ID).String(): lease,
			"expires_at": strconv.FormatInt(t0.Add(crashLease+dynamostore.DefaultExpiryMargin).Unix(), 10),
		}
		if len(item) != len(want) {
			t.Errorf("item = %v, want %v", item, want)
		}
		for k, v := range want {
			if item[k] != v {
				t.Errorf("item[%s] = %q, want %q (item %v)", k, item[k], v, item)
			}
		}
		// A release with other units than the take's changes nothing.
		if err := lim.Finish(ctx, one, b, 200, 0); err != nil {
			t.Fatal(err)
		}
		if n := rawItem(t, client, table, "if#speech#k")["n"]; n != "4" {
			t.Errorf("after a release of the holder of 3 as 1: n = %s, want 4", n)
		}
		if err := lim.Finish(ctx, three, b, 200, 0); err != nil {
			t.Fatal(err)
		}
		item = rawItem(t, client, table, "if#speech#k")
		if item["n"] != "1" || item["h3_"+wire.SlotID(b.Receipt.ID).String()] != "" {
			t.Errorf("after the release of the holder of 3: item %v, want n 1 and its attribute gone", item)
		}
	})
}

// TestRoundTripsCost: a take of several slots costs what a take of one
// does (one UpdateItem; a denial the same, with dynalite's GetItem), and
// so does its release; a take of more than the limit sends no write, one
// consistent GetItem for the headers.
func TestRoundTripsCost(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		store, counter := newStore(t, s)
		clock := limitertest.NewClock(t0.Add(1_234_567))
		lim, err := inflight.New(inflight.Config{
			Policy: &policy.Policy{Name: "jobs", Strategy: inflight.Strategy, Limit: 8, Window: time.Minute},
			Store:  store, Now: clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		denialGets := 1
		if s.OldOnConditionFailure {
			denialGets = 0
		}
		step := func(what string, units int64, wantAllowed bool, update, get int) edgelimit.Decision {
			t.Helper()
			counter.Reset()
			d, err := lim.Allow(ctx, edgelimit.Request{Key: "k", Cost: units})
			if err != nil || d.Allowed != wantAllowed {
				t.Fatalf("%s: %+v, %v; want allowed %v", what, d, err, wantAllowed)
			}
			if u, g := counter.Op("UpdateItem"), counter.Op("GetItem"); u != update || g != get || counter.Total() != int64(update+get) {
				t.Errorf("%s: %v calls, want %d UpdateItem and %d GetItem", what, counter.Snapshot(), update, get)
			}
			return d
		}
		a := step("take of 3 of a new item", 3, true, 1, 0)
		step("take of 3 beside it", 3, true, 1, 0)
		step("take of 3 with 2 free (a denial)", 3, false, 1, denialGets)
		step("take of 9 of 8 (never fits)", 9, false, 0, 1)
		counter.Reset()
		if err := lim.Finish(ctx, edgelimit.Request{Key: "k", Cost: 3}, a, 200, 0); err != nil {
			t.Fatal(err)
		}
		if counter.Op("UpdateItem") != 1 || counter.Total() != 1 {
			t.Errorf("release of 3: %v calls, want 1 UpdateItem", counter.Snapshot())
		}
		step("take of 3 of the released", 3, true, 1, 0)
		clock.Advance(time.Minute) // every lease ends, none released
		step("take of 8 that reclaims every expired holder", 8, true, 2, denialGets)
	})
}
