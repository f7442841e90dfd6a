package edgelimit

import (
	"context"
	"errors"
	"time"
)

// Waiting instead of a 429 (a policy's max_delay). A limiter that admits a
// request for a later turn spends its units at once, for that turn, and
// says how long the turn is away (Decision.Delay); the engine then holds
// the request, after every policy of its route has decided, for the
// longest such delay, and serves it. Spending first is what keeps a wait
// from over-admitting: the requests waiting are already counted, so a
// request arriving meanwhile is decided against them, as nginx's limit_req
// without nodelay does with its queue.
//
// A wait ends early when the request's context does (the client went, the
// server shuts down), and is not begun when the context's deadline (a
// Lambda invocation's) would leave less than Config.WaitMargin after it.
// Either way every policy's spending is given back and the request is
// answered as the delaying policy's 429 (Reason "wait-cut" in metrics),
// with Retry-After the time its turn was still away.

// defaultWaitMargin is Config.WaitMargin's default: time for the handler
// after a wait, before a Lambda invocation's deadline.
const defaultWaitMargin = time.Second

// reasonWaitCut is Event.Reason for a policy whose wait was cut short.
const reasonWaitCut = "wait-cut"

// errNoTimeToWait: the request's deadline is nearer than its wait and the
// margin.
var errNoTimeToWait = errors.New("edgelimit: the request's deadline leaves no time to wait")

func waitConfig(cfg Config) (func(context.Context, time.Duration) error, time.Duration) {
	sleep, margin := cfg.Sleep, cfg.WaitMargin
	if sleep == nil {
		sleep = sleepTimer
	}
	if margin <= 0 {
		margin = defaultWaitMargin
	}
	return sleep, margin
}

// sleepTimer is Config.Sleep's default.
func sleepTimer(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait holds a request every policy admitted until the latest turn one of
// them reserved (Decision.Delay), and reports whether the wait was cut
// short: then what every policy spent has been given back and the
// delaying policies deny.
func (e *Engine) wait(ctx context.Context, rs *routeSet, slots []slot) (cut bool) {
	var d time.Duration
	for _, c := range rs.policies {
		if s := &slots[c.slot]; s.o == allowed && !c.Shadow {
			d = max(d, s.d.Delay)
		}
	}
	if d <= 0 {
		return false
	}
	t0 := e.now()
	var err error
	if dl, ok := ctx.Deadline(); ok && dl.Sub(t0)-e.waitMargin < d {
		err = errNoTimeToWait
	} else {
		err = e.sleep(ctx, d)
	}
	waited := d
	if err != nil {
		waited = min(max(e.now().Sub(t0), 0), d)
	}
	for _, c := range rs.policies {
		if s := &slots[c.slot]; s.o == allowed && !c.Shadow && s.d.Delay > 0 {
			s.wait = min(waited, s.d.Delay)
		}
	}
	if err == nil {
		return false
	}
	// The request will not be served: give back what each policy spent,
	// with a budget of its own (the request's context may have ended, and
	// its budget passed while it waited).
	rctx, start := context.WithoutCancel(ctx), time.Now()
	e.refund(rctx, start, rs, rs.plain, slots)
	for _, g := range rs.groups {
		e.refund(rctx, start, rs, g, slots)
	}
	for _, c := range rs.policies {
		s := &slots[c.slot]
		if s.o != refunded || c.Shadow || s.d.Delay <= 0 {
			continue
		}
		// As the policy denies: its turn is still this far away.
		left := max(s.d.Delay-waited, time.Millisecond)
		s.d = Decision{Policy: s.d.Policy, Limit: s.d.Limit, Window: s.d.Window, Reset: left, RetryAfter: left, Reason: reasonWaitCut}
		s.o = denied
	}
	return true
}
