package dynamostore_test

import (
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

var t0 = time.Unix(1_700_000_000, 0)

// TestRoundTrips pins the calls each path costs: one UpdateItem to take a
// free slot and one to release it; a denial is that one UpdateItem (and the
// GetItem dynalite needs, as it ignores ALL_OLD); a reclaim of expired
// holders is one more UpdateItem.
func TestRoundTrips(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		store, counter := newStore(t, s)
		// An instant between milliseconds, as real ones are (a regression
		// test: the item once kept leases rounded up to the millisecond,
		// and every take paid a second write to extend expires_at).
		clock := limitertest.NewClock(t0.Add(1_234_567))
		lim, err := inflight.New(inflight.Config{
			Policy: &policy.Policy{Name: "jobs", Strategy: inflight.Strategy, Limit: 2, Window: time.Minute},
			Store:  store, Now: clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		r := edgelimit.Request{Key: "k"}
		denialGets := 1
		if s.OldOnConditionFailure {
			denialGets = 0
		}
		step := func(what string, wantAllowed bool, update, get int, f func() (edgelimit.Decision, error)) edgelimit.Decision {
			t.Helper()
			counter.Reset()
			d, err := f()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if d.Allowed != wantAllowed {
				t.Fatalf("%s: %+v, want allowed %v", what, d, wantAllowed)
			}
			if u, g := counter.Op("UpdateItem"), counter.Op("GetItem"); u != update || g != get || counter.Total() != int64(update+get) {
				t.Errorf("%s: %v calls, want %d UpdateItem and %d GetItem", what, counter.Snapshot(), update, get)
			}
			return d
		}
		allow := func() (edgelimit.Decision, error) { return lim.Allow(ctx, r) }
		a := step("take of a new item", true, 1, 0, allow)
		step("take of a free slot", true, 1, 0, allow)
		step("take with the limit held (a denial)", false, 1, denialGets, allow)
		step("peek", false, 0, 1, func() (edgelimit.Decision, error) { return lim.Peek(ctx, r) })
		step("release", false, 1, 0, func() (edgelimit.Decision, error) {
			return edgelimit.Decision{}, lim.Finish(ctx, r, a, 200, 0)
		})
		step("release again (nothing left)", false, 1, 0, func() (edgelimit.Decision, error) {
			return edgelimit.Decision{}, lim.Finish(ctx, r, a, 200, 0)
		})
		step("take of the released slot", true, 1, 0, allow)
		clock.Advance(time.Minute) // both leases end, neither released
		step("take that reclaims expired holders", true, 2, denialGets, allow)
		step("take after a reclaim (it removed both expired holders)", true, 1, 0, allow)
		step("take with the limit held again", false, 1, denialGets, allow)
		// A lease longer than the item's expires_at covers (a tier with a
		// longer window) costs one more write, and only then.
		clock.Advance(time.Minute)
		long := r
		long.Limits = policy.Limits{Window: 10 * time.Minute}
		step("take with a 10m lease", true, 2, denialGets, func() (edgelimit.Decision, error) { return lim.Allow(ctx, long) })
		step("take with a 1m lease after a 10m one", true, 2, 0, allow)
	})
}
