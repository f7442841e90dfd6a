package durablecounter

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// TestGCRARule: 5 per 10 s (T = 2 s), burst 5 (tolerance 10 s): a
// request of cost c at t fits while max(TAT, t) + c*T - t <= 10 s.
func TestGCRARule(t *testing.T) {
	t.Parallel()
	runSteps(t, ruleOf(GCRA, 5, 5, 10*time.Second), []step{
		{at: 0, cost: 5, wantAllowed: true, wantRemaining: 0}, // TAT 10 s
		{at: time.Second, cost: 1, wantAllowed: false, wantRemaining: 0, wantRetry: time.Second},
		{at: 2 * time.Second, cost: 1, wantAllowed: true, wantRemaining: 0}, // TAT 12 s
		{at: 6 * time.Second, cost: 1, wantAllowed: true, wantRemaining: 1}, // TAT 14 s
		{at: 6 * time.Second, cost: 2, wantAllowed: false, wantRemaining: 1, wantRetry: 2 * time.Second},
		{at: 8 * time.Second, cost: 2, wantAllowed: true, wantRemaining: 0},                                // TAT 18 s
		{at: 30 * time.Second, cost: 3, wantAllowed: true, wantRemaining: 2},                               // idle: full, TAT 36 s
		{at: 30 * time.Second, cost: 6, wantAllowed: false, wantRemaining: 2, wantRetry: 10 * time.Second}, // above the burst
	})
	// A burst other than the limit: 5 per 10 s with burst 2.
	runSteps(t, ruleOf(GCRA, 5, 2, 10*time.Second), []step{
		{at: 0, cost: 2, wantAllowed: true, wantRemaining: 0},
		{at: time.Second, cost: 1, wantAllowed: false, wantRemaining: 0, wantRetry: time.Second},
		{at: 2 * time.Second, cost: 1, wantAllowed: true, wantRemaining: 0},
		{at: 10 * time.Second, cost: 2, wantAllowed: true, wantRemaining: 0},
	})
}

// TestGCRARefundNeverOverGives drives one gcra bucket with random spends
// and refunds: some right after their admission, as of its instant (the
// engine's case), the others later, of any earlier admission, in any order,
// as of the current instant. After every step the bucket must hold no more
// than it would had the refunded requests never been admitted: the TAT is
// never before the one the admissions that stand give when replayed alone.
// A refund right after its admission gives back the whole cost.
func TestGCRARefundNeverOverGives(t *testing.T) {
	t.Parallel()
	T := int64(time.Second)
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		burst := 1 + rng.Int64N(4)
		a := newGCRA(params{name: "p", limit: 1, window: time.Second, burst: burst}).(*gcra)
		type spend struct {
			at, cost int64
			rc       edgelimit.Receipt
			refunded bool
		}
		var st state
		var spends []*spend
		now := int64(1_700_000_000) * T
		for step := range 40 {
			now += rng.Int64N(9) * T / 4
			var live []*spend
			for _, s := range spends {
				if !s.refunded {
					live = append(live, s)
				}
			}
			if len(live) == 0 || rng.IntN(10) < 6 {
				if cost := 1 + rng.Int64N(burst); a.fits(st, now, cost) {
					te := a.instant(st, now)
					st = a.commit(st, now, cost)
					sp := &spend{at: te, cost: cost, rc: a.receipt(st, te, cost)}
					spends = append(spends, sp)
					if rng.IntN(3) == 0 { // another policy denied: refunded at once
						before := st.n
						st, _ = a.giveBack(st, sp.rc, now, cost)
						sp.refunded = true
						if before-st.n != cost*a.T {
							t.Fatalf("seed %d step %d: a refund right after its admission gave back %s, want %s",
								seed, step, time.Duration(before-st.n), time.Duration(cost*a.T))
						}
					}
				}
			} else {
				s := live[rng.IntN(len(live))]
				st, _ = a.giveBack(st, s.rc, now, s.cost)
				s.refunded = true
			}
			// What the admissions that stand give, replayed alone.
			var standing int64
			for _, x := range spends {
				if !x.refunded {
					standing = max(standing, x.at) + x.cost*a.T
				}
			}
			if got, want := max(st.n, now), max(standing, now); got < want {
				t.Fatalf("seed %d step %d: the bucket is full in %s, but the admissions that stand fill it for %s: a refund gave back more than it spent",
					seed, step, time.Duration(got-now), time.Duration(want-now))
			}
		}
	}
}
