package durablecounter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
)

// Issue 20, item 5: `usage` says what the key's next requests can spend,
// its grants included, and exactly that many are then admitted: 2 spent
// of 6, grants of 3 and 2: usage says 9 (4 of the quota, a grant of 5),
// and 9 are admitted; 4 of them later it says 5 (0 of the quota), and 5
// are. Each operator's command is an engine of its own, as each run of
// the CLI is.
func TestUsageCountsGrants(t *testing.T) {
	t.Parallel()
	clock := limitertest.NewClock(limitertest.WindowStart(quotaT0, time.Hour))
	forEachQuotaBackend(t, clock.Now, func(t *testing.T, b quotaBackend) {
		forEachAlgorithm(t, func(t *testing.T, alg string) {
			pol := "usage-" + alg
			policies := fmt.Sprintf(`version: 1
policies:
  - {name: %s, routes: ["GET /u"], key: header:X-Api-Key, strategy: durable, algorithm: %s,
     limit: 6, window: 1h, overrides: true, store_timeout: 30s}
`, pol, alg)
			fn, op := quotaEngine(t, policies, b, clock.Now), quotaEngine(t, policies, b, clock.Now)
			usage := func() (edgelimit.Usage, error) {
				return quotaEngine(t, policies, b, clock.Now).Usage(context.Background(), pol, "key-acme", "")
			}
			ctx := context.Background()
			admit := func(n int) int {
				got := 0
				for range n {
					v := get(fn, "/u", "key-acme", "")
					if v.Allowed {
						got++
					}
					v.Release()
				}
				return got
			}
			if got := admit(2); got != 2 {
				t.Fatalf("%d of the first 2 admitted", got)
			}
			until := clock.Now().Add(2 * time.Hour).Truncate(time.Second)
			for _, units := range []int64{3, 2} {
				if err := op.Grant(ctx, pol, "key-acme", units, until); err != nil {
					t.Fatal(err)
				}
			}
			check := func(remaining, quota int64) {
				t.Helper()
				u, err := usage()
				if err != nil {
					t.Fatal(err)
				}
				if u.Remaining != remaining || u.Quota != quota || u.Grant.Units != 5 || !u.Grant.Until.Equal(until) || !u.Allowed {
					t.Errorf("usage: remaining %d, quota %d, grant %+v, allowed %v; want %d, %d, 5 until %s, true",
						u.Remaining, u.Quota, u.Grant, u.Allowed, remaining, quota, until)
				}
			}
			check(9, 4)
			if got := admit(4); got != 4 {
				t.Fatalf("%d of the quota's 4 admitted", got)
			}
			check(5, 0)
			if got := admit(20); got != 5 {
				t.Errorf("after usage said 5: %d admitted", got)
			}
			u, err := usage()
			if err != nil {
				t.Fatal(err)
			}
			if u.Remaining != 0 || u.Allowed || u.Grant.Units != 0 {
				t.Errorf("usage once all is spent: %+v, want nothing left", u)
			}
		})
	})
}
