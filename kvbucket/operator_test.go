package kvbucket

import (
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// TestStaleDenialIsReadAgain pins the stale re-check at fixed instants: a
// denial the local state proves stays local (no KV call) while what the
// instance knows of the KV is less than a sync interval old, even when
// another instance gave tokens back meanwhile; once it is a sync interval
// old, the denial is read again (one strong Get) and the fresh state
// decides. A failed re-read keeps the denial and the key is not read again
// for a sync interval. Before, a local denial was never read again while
// the instance held no unwritten changes: an operator's Reset or Grant on
// another instance never reached an instance that kept denying the key.
func TestStaleDenialIsReadAgain(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		pol := kvPolicy("stale", 2, 2, time.Hour, time.Second)
		at := func(d time.Duration) { clk.Set(t0.Add(d)) }
		t.Run("fresh state decides", func(t *testing.T) {
			at(0)
			kv := &faultKV{KV: k.kv}
			a := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
			other := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			req := edgelimit.Request{Key: "k"}
			calls := func(what string, allowed bool, gets, updates int64) {
				t.Helper()
				d, err := a.Allow(ctx, req)
				if err != nil || d.Allowed != allowed {
					t.Fatalf("%s at t0+%s: %+v, %v; want allowed=%v", what, clk.Now().Sub(t0), d, err, allowed)
				}
				if g, u := kv.gets.Load(), kv.updates.Load(); g != gets || u != updates {
					t.Errorf("%s at t0+%s: %d gets, %d updates in all; want %d, %d", what, clk.Now().Sub(t0), g, u, gets, updates)
				}
			}
			calls("first", true, 1, 1)
			calls("second", true, 1, 2)
			calls("empty", false, 1, 2) // the local state proves it
			at(500 * time.Millisecond)
			calls("still empty", false, 1, 2)
			// Another instance gives both tokens back (as an operator's
			// Reset would make the bucket full).
			at(600 * time.Millisecond)
			if err := other.RefundAt(ctx, clk.Now(), edgelimit.Request{Key: "k", Cost: 2}); err != nil {
				t.Fatal(err)
			}
			if got := tokensIn(t, k.kv, a, "k", clk.Now()); got != 2 {
				t.Fatalf("the KV holds %d tokens after the refund, want 2", got)
			}
			at(999 * time.Millisecond)
			calls("fresh denial", false, 1, 2) // learned at t0: not yet stale
			at(time.Second)
			// One read, then the fresh state decides: a sync (one write).
			calls("stale denial read again", true, 2, 3)
		})
		t.Run("a failed read keeps the denial", func(t *testing.T) {
			at(0)
			kv := &faultKV{KV: k.kv}
			a := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
			other := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			req := edgelimit.Request{Key: "f"}
			for range 2 {
				if d, err := a.Allow(ctx, req); err != nil || !d.Allowed {
					t.Fatalf("spend: %+v, %v", d, err)
				}
			}
			if err := other.RefundAt(ctx, clk.Now(), edgelimit.Request{Key: "f", Cost: 2}); err != nil {
				t.Fatal(err)
			}
			kv.failGets(errBroken)
			deny := func(what string, gets int64) {
				t.Helper()
				d, err := a.Allow(ctx, req)
				if err != nil || d.Allowed {
					t.Errorf("%s at t0+%s: %+v, %v; want the local denial", what, clk.Now().Sub(t0), d, err)
				}
				if g := kv.gets.Load(); g != gets {
					t.Errorf("%s at t0+%s: %d gets in all, want %d", what, clk.Now().Sub(t0), g, gets)
				}
			}
			at(time.Second)
			deny("re-read fails", 2)
			at(1500 * time.Millisecond)
			deny("within a sync interval of the failed read", 2)
			at(1999 * time.Millisecond)
			deny("just before", 2)
			kv.getErr.Store(nil)
			at(2 * time.Second)
			if d, err := a.Allow(ctx, req); err != nil || !d.Allowed || kv.gets.Load() != 3 {
				t.Errorf("a sync interval after the failed read: %+v, %v, %d gets; want allowed after a third read", d, err, kv.gets.Load())
			}
			if st := a.Stats(); st.Errors != 1 {
				t.Errorf("Stats.Errors = %d, want 1", st.Errors)
			}
		})
	})
}
