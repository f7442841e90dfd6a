package kvbucket

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// TestSettle: one instance's settlement at fixed instants, with and
// without the cache: less than the reservation gives the difference back,
// more charges the excess (into debt, once), zero gives it all back; and a
// settlement after refill gives back at most what refill has not brought
// back of the reservation (less than the exact difference: kv's
// approximation, never in the client's favour).
func TestSettle(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("nocache=%v", noCache), func(t *testing.T) {
			clk := newClock(t0)
			// 20 tokens, refilled at 1 a second.
			b := mustNew(t, Config{Policy: kvPolicy("settle", 20, 20, 20*time.Second, time.Second), KV: NewMemory(MemoryConfig{Now: clk.Now}), Now: clk.Now, NoCache: noCache})
			left := func() int64 {
				t.Helper()
				d, err := b.Peek(ctx, edgelimit.Request{Key: "k"})
				if err != nil {
					t.Fatal(err)
				}
				return d.Remaining
			}
			used := int64(0)
			for i, st := range []struct{ reserve, cost int64 }{{5, 2}, {5, 5}, {3, 0}, {4, 9}, {4, 1}} {
				req := edgelimit.Request{Key: "k", Cost: st.reserve}
				d, err := b.Allow(ctx, req)
				if err != nil || !d.Allowed {
					t.Fatalf("step %d: reserve %d: %+v, %v", i, st.reserve, d, err)
				}
				if _, err := b.Settle(ctx, req, d, st.cost); err != nil {
					t.Fatal(err)
				}
				used += st.cost
				if got := left(); got != 20-used {
					t.Errorf("step %d: reserve %d, settle at %d: %d left, want %d", i, st.reserve, st.cost, got, 20-used)
				}
			}
			// 17 used, 3 left: a reservation of 3 settled at 13 takes the
			// bucket 10 into debt; 10 seconds of refill repay it.
			req := edgelimit.Request{Key: "k", Cost: 3}
			d, _ := b.Allow(ctx, req)
			if _, err := b.Settle(ctx, req, d, 13); err != nil {
				t.Fatal(err)
			}
			clk.Add(10 * time.Second)
			if got := left(); got != 0 {
				t.Errorf("10 s after a debt of 10: %d left, want 0", got)
			}
			clk.Add(20 * time.Second) // full again
			// 10 kept, then a reservation of 6 (4 left), 4 seconds of refill
			// (8 left), settled at 0: kv gives back what refill has not
			// brought back of the 6 (2), never more: 10 left, where the
			// exact count, as if the 6 were never spent, is 14. It never
			// gives back more than the exact.
			keep := edgelimit.Request{Key: "k", Cost: 10}
			if d, _ := b.Allow(ctx, keep); !d.Allowed {
				t.Fatal("10 of a full bucket: denied")
			}
			req = edgelimit.Request{Key: "k", Cost: 6}
			d, _ = b.Allow(ctx, req)
			clk.Add(4 * time.Second)
			if _, err := b.Settle(ctx, req, d, 0); err != nil {
				t.Fatal(err)
			}
			if got := left(); got != 10 {
				t.Errorf("after settling at 0 a reservation partly refilled: %d left, want 10 (what refill had not brought back)", got)
			}
		})
	}
}
