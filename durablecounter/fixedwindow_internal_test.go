package durablecounter

import (
	"testing"
	"time"
)

// TestFixedWindowRule: 5 per 10 s windows aligned to the epoch; a new
// window is a new item, from nothing.
func TestFixedWindowRule(t *testing.T) {
	t.Parallel()
	runSteps(t, ruleOf(FixedWindow, 5, 5, 10*time.Second), []step{
		{at: 0, cost: 1, wantAllowed: true, wantRemaining: 4},
		{at: time.Second, cost: 3, wantAllowed: true, wantRemaining: 1},
		{at: 2 * time.Second, cost: 2, wantAllowed: false, wantRemaining: 1, wantRetry: 8 * time.Second},
		{at: 3 * time.Second, cost: 1, wantAllowed: true, wantRemaining: 0},
		{at: 10*time.Second - time.Millisecond, cost: 1, wantAllowed: false, wantRemaining: 0, wantRetry: time.Millisecond},
		{at: 10 * time.Second, cost: 1, wantAllowed: true, wantRemaining: 4},
		{at: 10 * time.Second, cost: 5, wantAllowed: false, wantRemaining: 4, wantRetry: 10 * time.Second},
		{at: 10 * time.Second, cost: 6, wantAllowed: false, wantRemaining: 4, wantRetry: 10 * time.Second}, // never fits
		{at: 19 * time.Second, cost: 4, wantAllowed: true, wantRemaining: 0},
	})
}
