package edgelimit

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"
)

// finishState is what Verdict.Finish needs of an admitted request: the
// policies with work after the response, each with its request and
// decision, and the cost the handler reported.
type finishState struct {
	e     *Engine
	rs    *routeSet
	items []finishItem
	cost  atomic.Int64
	done  atomic.Bool
}

type finishItem struct {
	c   *compiled
	req Request
	d   Decision
	o   outcome
}

// finishing keeps what Finish will need of an admitted request.
func (e *Engine) finishing(rs *routeSet, slots []slot) *finishState {
	f := &finishState{e: e, rs: rs}
	for _, c := range rs.policies {
		s := &slots[c.slot]
		if c.finishes && (s.o == allowed || s.o == known) && !s.d.Degraded {
			f.items = append(f.items, finishItem{c: c.compiled, req: s.req, d: s.d, o: s.o})
		}
	}
	if len(f.items) == 0 {
		return nil
	}
	return f
}

// ReportCost adds units to what the request cost, for the policies that
// charge after the response (charge: response): a handler calls it, on
// the Verdict edgelimit.FromContext returns, with what the request really
// used (tokens generated, bytes sent). The total is charged when the
// middleware finishes the request; without a report, the policy's cost is.
// It does nothing on a Verdict without such a policy. The client never sets
// its cost: only the handler can call this.
func (v *Verdict) ReportCost(units int64) {
	if v != nil && v.finish != nil && units > 0 {
		v.finish.cost.Add(units)
	}
}

// Finishes reports whether the request has work after the response: the
// middleware must call Finish.
func (v *Verdict) Finishes() bool { return v.finish != nil }

// Finish tells the engine how an admitted request ended, for the policies
// with work after the response: those that charge after it (the reported
// cost, or only for some statuses: charge: response, charge_status), those
// that refund for some statuses (refund_status), and limiters that hold a
// resource while the request runs (an in-flight limit's slot). The
// middleware calls it once the handler has returned, with the response's
// status (500 for a handler that panicked or failed); a second call does
// nothing. Its store calls have their own time budget and are not cut short
// when the client goes away (ctx's cancellation is ignored). It is safe to call on
// any Verdict.
func (v *Verdict) Finish(ctx context.Context, status int) {
	f := v.finish
	if f == nil || !f.done.CompareAndSwap(false, true) {
		return
	}
	f.e.finish(ctx, f, status)
}

func (e *Engine) finish(ctx context.Context, f *finishState, status int) {
	// The work after the response must land even when the client has gone
	// (net/http cancels the request's context then): it keeps the context's
	// values, not its cancellation, and each call its own budget.
	ctx = context.WithoutCancel(ctx)
	reported := f.cost.Load()
	start := time.Now()
	for _, it := range f.items {
		c, req := it.c, it.req
		var err error
		what := ""
		switch {
		case c.ChargeAfter:
			if reported > 0 {
				req.Cost = reported
			}
			what = "charge"
			err = e.charge(ctx, start, c, req)
		case len(c.ChargeStatus) > 0:
			if slices.Contains(c.ChargeStatus, status) {
				what = "charge"
				err = e.charge(ctx, start, c, req)
			}
		case len(c.RefundStatus) > 0 && it.o == allowed && slices.Contains(c.RefundStatus, status):
			what = "refund"
			err = e.afterCall(ctx, start, c, func(cctx context.Context) error { return c.refund.Refund(cctx, req, it.d) })
		}
		if c.finisher != nil && it.o == allowed {
			ferr := e.afterCall(ctx, start, c, func(cctx context.Context) error {
				return c.finisher.Finish(cctx, req, it.d, status, reported)
			})
			if ferr != nil && err == nil {
				what, err = "finish", ferr
			}
		}
		if err != nil {
			e.log.LogAttrs(ctx, slog.LevelError, "edgelimit: after the response: "+what+" failed",
				slog.String("policy", c.Name), slog.String("route", f.rs.label), slog.Int("status", status),
				slog.String("error", err.Error()))
		}
		if e.observe != nil && what != "" {
			ev := Event{Route: f.rs.label, Policy: c.Name, Strategy: c.StrategyName(), Allowed: true, Shadow: c.Shadow,
				Reason: "after-response", Context: ctx, Key: req.Key}
			switch what {
			case "refund":
				ev.Refunded, ev.RefundError = true, err
			default:
				ev.StoreError = err
			}
			e.observe(ev)
		}
	}
}

// charge spends what req says, whether or not it fits, within the policy's
// budget from start.
func (e *Engine) charge(ctx context.Context, start time.Time, c *compiled, req Request) error {
	return e.afterCall(ctx, start, c, func(cctx context.Context) error {
		_, err := c.charger.Charge(cctx, req)
		return err
	})
}

// afterCall makes one store call of the work after the response, within
// the policy's budget from start, through its store's breaker: while the
// breaker is open the call gets no budget, and fails at once unless the
// limiter needs no store for it.
func (e *Engine) afterCall(ctx context.Context, start time.Time, c *compiled, call func(context.Context) error) error {
	tk := c.breaker.admit(ctx, e.now())
	cctx := e.budget(ctx, start, tk.budget(c.StoreTimeout))
	err := call(cctx)
	cctx.stop()
	c.breaker.done(ctx, tk, resultOf(cctx, ctx, err), err)
	if err != nil && tk == refused {
		err = fmt.Errorf("%w: %w", errBreakerOpen, err)
	}
	return err
}
