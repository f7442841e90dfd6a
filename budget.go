package edgelimit

import (
	"context"
	"sync"
	"time"
)

// budgetCtx is what context.WithTimeout(parent, d) gives a limiter, without
// the timer until the limiter needs one: the timer starts on the first call
// of Done or Value (so the SDK and anything that waits or derives a context
// get a real one), while Deadline and Err answer from the clock until then.
// A limiter that answers from memory never starts it, which saves three
// allocations and a timer-heap insert and delete per decision.
type budgetCtx struct {
	parent   context.Context
	deadline time.Time

	mu       sync.Mutex
	inner    context.Context // context.WithDeadline(parent, deadline), once started
	cancel   context.CancelFunc
	canceled bool
}

// budget returns a context that expires d after start, the real time the
// request started: every store call of one request, however many policies
// guard its route, ends by the request's start plus the longest budget of
// those policies, so the request waits at most one budget in all.
func (e *Engine) budget(parent context.Context, start time.Time, d time.Duration) *budgetCtx {
	return &budgetCtx{parent: parent, deadline: deadlineOf(parent, start, d)}
}

// slotBudget is budget for a policy's store call, in the context the
// Verdict holds for the policy's first call (a request's common path: one
// call per policy), so that it allocates nothing. A limiter must not keep
// the context it is given past its call (Limiter's contract): the Verdict
// and its budgets are reused once the response is written.
func (e *Engine) slotBudget(s *slot, parent context.Context, start time.Time, d time.Duration) *budgetCtx {
	b := s.bud
	if b == nil {
		return e.budget(parent, start, d)
	}
	s.bud = nil
	// A budget in a reused Verdict was never started (Release drops a
	// Verdict whose budget was), so only these fields are left over.
	b.parent, b.deadline, b.canceled = parent, deadlineOf(parent, start, d), false
	return b
}

// wasStarted reports a budget whose real context was created: a limiter
// waited on it or derived one from it, which might outlive the call, so
// the budget is not reused.
func (c *budgetCtx) wasStarted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inner != nil
}

func deadlineOf(parent context.Context, start time.Time, d time.Duration) time.Time {
	deadline := start.Add(d)
	if pd, ok := parent.Deadline(); ok && pd.Before(deadline) {
		deadline = pd
	}
	return deadline
}

// started returns the real context, creating it on first use.
func (c *budgetCtx) started() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancel = context.WithDeadline(c.parent, c.deadline)
		if c.canceled {
			c.cancel()
		}
	}
	return c.inner
}

// reached reports whether the limiter reached for the store through c:
// started its timer (Done or Value: a store call, or a wait for one). A
// decision from memory never does.
func (c *budgetCtx) reached() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inner != nil
}

// stop releases the context, as the CancelFunc of WithTimeout does.
func (c *budgetCtx) stop() {
	c.mu.Lock()
	c.canceled = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *budgetCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *budgetCtx) Done() <-chan struct{} { return c.started().Done() }

func (c *budgetCtx) Value(key any) any { return c.started().Value(key) }

func (c *budgetCtx) Err() error {
	c.mu.Lock()
	inner, canceled := c.inner, c.canceled
	c.mu.Unlock()
	if inner != nil {
		return inner.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if canceled {
		return context.Canceled
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}
