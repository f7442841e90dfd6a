package durablecounter

import (
	"testing"
	"time"
)

// TestSlidingLogRule: 5 per rolling 10 s, at millisecond resolution: a unit
// admitted at m counts until m + 10 s (exclusive).
func TestSlidingLogRule(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	runSteps(t, ruleOf(SlidingLog, 5, 5, 10*time.Second), []step{
		{at: 0, cost: 2, wantAllowed: true, wantRemaining: 3},
		{at: 4 * time.Second, cost: 3, wantAllowed: true, wantRemaining: 0},
		{at: 10*time.Second - ms, cost: 1, wantAllowed: false, wantRemaining: 0, wantRetry: ms},
		{at: 10 * time.Second, cost: 1, wantAllowed: true, wantRemaining: 1}, // the 2 of 0 s left
		{at: 14*time.Second - ms, cost: 2, wantAllowed: false, wantRemaining: 1, wantRetry: ms},
		{at: 14 * time.Second, cost: 2, wantAllowed: true, wantRemaining: 2},                               // the 3 of 4 s left
		{at: 14 * time.Second, cost: 6, wantAllowed: false, wantRemaining: 2, wantRetry: 10 * time.Second}, // never fits
	})
}
