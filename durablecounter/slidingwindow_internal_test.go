package durablecounter

import (
	"testing"
	"time"
)

// TestSlidingWindowRule: 5 per 10 s; the previous window's count weighs
// what is left of it, ceil(p * (end - t) / window).
func TestSlidingWindowRule(t *testing.T) {
	t.Parallel()
	runSteps(t, ruleOf(SlidingWindow, 5, 5, 10*time.Second), []step{
		{at: 0, cost: 3, wantAllowed: true, wantRemaining: 2},
		{at: 5 * time.Second, cost: 2, wantAllowed: true, wantRemaining: 0},
		// At 12 s the estimate is ceil(5 * 8/10) = 4: a cost of 1 fits then.
		{at: 5 * time.Second, cost: 1, wantAllowed: false, wantRemaining: 0, wantRetry: 7 * time.Second},
		// The boundary: the whole previous count still weighs.
		{at: 10 * time.Second, cost: 1, wantAllowed: false, wantRemaining: 0, wantRetry: 2 * time.Second},
		{at: 12 * time.Second, cost: 1, wantAllowed: true, wantRemaining: 0},                              // 1 + ceil(5*8/10) = 5
		{at: 14 * time.Second, cost: 1, wantAllowed: true, wantRemaining: 0},                              // 2 + ceil(5*6/10) = 5
		{at: 16 * time.Second, cost: 2, wantAllowed: false, wantRemaining: 1, wantRetry: 2 * time.Second}, // 2 + 2: 1 left
		{at: 18 * time.Second, cost: 2, wantAllowed: true, wantRemaining: 0},                              // 4 + ceil(5*2/10) = 5
		{at: 30 * time.Second, cost: 5, wantAllowed: true, wantRemaining: 0},                              // two windows on: nothing weighs
	})
}
