package kvbucket

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// kvUnderTest is a KV to run the conformance cases against, with the
// counter of its SDK calls (nil for memory).
type kvUnderTest struct {
	name    string
	kv      KV
	counter *ddbtest.Counter
	// region returns region r's view of the same table in a deployment
	// over regions a and b (DynamoDB only).
	region func(r string) KV
}

// forEachKV runs f on the memory KV and on a fresh table of each server.
func forEachKV(t *testing.T, f func(t *testing.T, k kvUnderTest, clk *clock)) {
	t.Run("memory", func(t *testing.T) {
		clk := newClock(t0)
		f(t, kvUnderTest{name: "memory", kv: NewMemory(MemoryConfig{Now: clk.Now})}, clk)
	})
	for _, srv := range ddbtest.Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			clk := newClock(t0)
			kv, tab := dynamoKV(t, srv, clk.Now)
			region := func(r string) KV { return tab.KV(clk.Now, r, "a", "b") }
			f(t, kvUnderTest{name: srv.Name, kv: kv, counter: tab.Counter, region: region}, clk)
		})
	}
}

// TestKVUpdateSemantics is the KV conformance suite: the memory KV and
// DynamoDB (on dynalite and moto) apply an Update alike. A raise sets the
// TAT to its floor plus the addition when it is below the floor; otherwise
// the addition adds; a conditional update that does not fit changes
// nothing; writers are registered per epoch and old epochs dropped. Values
// beyond 64 bits round-trip exactly.
func TestKVUpdateSemantics(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		calls := func() int64 {
			if k.counter == nil {
				return 0
			}
			n := k.counter.Total()
			k.counter.Reset()
			return n
		}
		update := func(what string, u wire.Update, applied bool, tat int64, spent int64, writers []wire.Writer) wire.Tally {
			t.Helper()
			got, err := k.kv.update(ctx, "p#k", u)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if got.Applied != applied || !got.Own.Has || got.Own.TAT != wire.WideOf(tat) || got.Own.Spent != spent || !sameWriters(got.Own.Writers, writers) {
				t.Errorf("%s = %+v, want applied %v, TAT %d, spent %d, writers %v", what, got, applied, tat, spent, writers)
			}
			return got
		}
		if got, err := k.kv.get(ctx, "p#k", wire.Eventual); err != nil || got.Own.Has {
			t.Fatalf("Get(missing) = %+v, %v, want no state", got, err)
		}
		calls()
		update("raise of a missing part", wire.Update{Add: wire.WideOf(7), Spent: 1, Floor: wire.WideOf(100), HasFloor: true, RaiseFirst: true,
			Writer: 5, Epoch: 10, TTL: time.Minute}, true, 107, 1, []wire.Writer{{Epoch: 10, ID: 5}})
		if n := calls(); k.counter != nil && n != 1 {
			t.Errorf("a raise guessed right took %d calls, want 1", n)
		}
		update("add above the floor, guessed as a raise", wire.Update{Add: wire.WideOf(3), Spent: 1, Floor: wire.WideOf(50), HasFloor: true, RaiseFirst: true,
			Writer: 6, Epoch: 10, TTL: time.Minute}, true, 110, 2, []wire.Writer{{Epoch: 10, ID: 5}, {Epoch: 10, ID: 6}})
		if n := calls(); k.counter != nil && n != 2 {
			t.Errorf("a raise guessed wrong took %d calls, want 2", n)
		}
		update("raise below the floor, guessed as an add", wire.Update{Add: wire.WideOf(2), Spent: 1, Floor: wire.WideOf(200), HasFloor: true,
			Writer: 5, Epoch: 10, TTL: time.Minute}, true, 202, 3, []wire.Writer{{Epoch: 10, ID: 5}, {Epoch: 10, ID: 6}})
		update("add without a floor", wire.Update{Add: wire.WideOf(-2), Spent: -1, Writer: 5, Epoch: 11, TTL: time.Minute},
			true, 200, 2, []wire.Writer{{Epoch: 10, ID: 5}, {Epoch: 10, ID: 6}, {Epoch: 11, ID: 5}})
		calls()
		update("conditional, does not fit", wire.Update{Add: wire.WideOf(5), Spent: 1, Floor: wire.WideOf(100), HasFloor: true,
			Conditional: true, MaxTAT: wire.WideOf(199), Writer: 7, Epoch: 11, TTL: time.Minute}, false, 200, 2, []wire.Writer{{Epoch: 10, ID: 5}, {Epoch: 10, ID: 6}, {Epoch: 11, ID: 5}})
		update("conditional, fits", wire.Update{Add: wire.WideOf(5), Spent: 1, Floor: wire.WideOf(100), HasFloor: true,
			Conditional: true, MaxTAT: wire.WideOf(200), Writer: 7, Epoch: 11, TTL: time.Minute}, true, 205, 3, []wire.Writer{{Epoch: 10, ID: 5}, {Epoch: 10, ID: 6}, {Epoch: 11, ID: 5}, {Epoch: 11, ID: 7}})
		update("conditional on spent, does not fit", wire.Update{Add: wire.WideOf(5), Spent: 1, Floor: wire.WideOf(100), HasFloor: true,
			Conditional: true, MaxTAT: wire.WideOf(1000), MaxSpent: 2, HasMaxSpent: true, Writer: 8, Epoch: 11, TTL: time.Minute}, false, 205, 3, []wire.Writer{{Epoch: 10, ID: 5}, {Epoch: 10, ID: 6}, {Epoch: 11, ID: 5}, {Epoch: 11, ID: 7}})
		update("conditional raise", wire.Update{Add: wire.WideOf(5), Spent: 1, Floor: wire.WideOf(300), HasFloor: true, RaiseFirst: true,
			Conditional: true, MaxTAT: wire.WideOf(10), MaxSpent: 3, HasMaxSpent: true, Writer: 8, Epoch: 11, TTL: time.Minute}, true, 305, 4, []wire.Writer{{Epoch: 10, ID: 5}, {Epoch: 10, ID: 6}, {Epoch: 11, ID: 5}, {Epoch: 11, ID: 7}, {Epoch: 11, ID: 8}})
		update("a later epoch drops the writers before the previous one", wire.Update{Add: wire.WideOf(1), Writer: 9, Epoch: 12, Stale: []int64{10}, TTL: time.Minute},
			true, 306, 4, []wire.Writer{{Epoch: 11, ID: 5}, {Epoch: 11, ID: 7}, {Epoch: 11, ID: 8}, {Epoch: 12, ID: 9}})
		update("a cap lowers a TAT from a clock far ahead", wire.Update{Add: wire.WideOf(1), Cap: wire.WideOf(250), HasCap: true, Writer: 9, Epoch: 12, TTL: time.Minute},
			true, 251, 4, []wire.Writer{{Epoch: 11, ID: 5}, {Epoch: 11, ID: 7}, {Epoch: 11, ID: 8}, {Epoch: 12, ID: 9}})
		if got, err := k.kv.get(ctx, "p#k", wire.Strong); err != nil || got.Own.TAT != wire.WideOf(251) || got.Own.Spent != 4 {
			t.Errorf("Get = %+v, %v, want TAT 251, spent 4", got, err)
		}

		// Beyond 64 bits: an instant of now times a limit of a billion.
		big := wire.Mul(t0.UnixNano(), 1_000_000_000).Add(wire.WideOf(12345))
		got, err := k.kv.update(ctx, "p#big", wire.Update{Add: wire.WideOf(1), Floor: big, HasFloor: true, RaiseFirst: true, TTL: time.Minute})
		if err != nil || got.Own.TAT != big.Add(wire.WideOf(1)) {
			t.Errorf("Update(big) = %+v, %v, want TAT %s", got, err, big.Add(wire.WideOf(1)))
		}
		if got, err := k.kv.get(ctx, "p#big", wire.Strong); err != nil || got.Own.TAT != big.Add(wire.WideOf(1)) {
			t.Errorf("Get(big) = %+v, %v, want TAT %s", got, err, big.Add(wire.WideOf(1)))
		}

		// A concurrent burst of additions all land: none replaces another.
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				if _, err := k.kv.update(ctx, "p#many", wire.Update{Add: wire.WideOf(10), Spent: 1, Floor: wire.WideOf(1000), HasFloor: true, RaiseFirst: i%2 == 0, Writer: uint32(i + 1), Epoch: 1, TTL: time.Minute}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if got, err := k.kv.get(ctx, "p#many", wire.Strong); err != nil || got.Own.TAT != wire.WideOf(1160) || got.Own.Spent != 16 || len(got.Own.Writers) != 16 {
			t.Errorf("after 16 concurrent additions: %+v, %v, want TAT 1160, spent 16, 16 writers", got, err)
		}

		if k.region == nil {
			return
		}
		// Regions: each writes its own item, and reads the other's.
		ra, rb := k.region("a"), k.region("b")
		if _, err := ra.update(ctx, "p#r", wire.Update{Add: wire.WideOf(5), Spent: 1, Floor: wire.WideOf(100), HasFloor: true, RaiseFirst: true, Writer: 1, Epoch: 1, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		got, err = rb.update(ctx, "p#r", wire.Update{Add: wire.WideOf(7), Spent: 2, Floor: wire.WideOf(50), HasFloor: true, RaiseFirst: true, Writer: 2, Epoch: 1, TTL: time.Minute})
		if err != nil || got.Own.TAT != wire.WideOf(57) || got.Own.Spent != 2 || len(got.Others) != 1 || got.Others[0].TAT != wire.WideOf(105) || got.Others[0].Spent != 1 {
			t.Errorf("region b's update = %+v, %v, want its own TAT 57 spent 2 and a's TAT 105 spent 1", got, err)
		}
		for _, r := range []string{"p#r@a", "p#r@b"} {
			if got, _ := k.kv.get(ctx, r, wire.Strong); !got.Own.Has {
				t.Errorf("no item %q: each region writes an item of its own", "kv#"+r)
			}
		}
		if got, err := ra.get(ctx, "p#r", wire.Eventual); err != nil || got.Own.TAT != wire.WideOf(105) || len(got.Others) != 1 || got.Others[0].TAT != wire.WideOf(57) {
			t.Errorf("region a's read = %+v, %v, want its own 105 and b's 57", got, err)
		}
	})
}

func sameWriters(got, want []wire.Writer) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}
