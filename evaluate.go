package edgelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/edgelimit/edgelimit/policy"
)

// outcome is what became of one policy's part in a request.
type outcome uint8

const (
	// notEvaluated: not asked (a shadow policy without its key, or a
	// policy that cannot be peeked once another denied).
	notEvaluated outcome = iota
	// allowed: admitted and spent.
	allowed
	// denied: a violated policy (decided, from a deny cache, or peeked);
	// nothing of it was spent.
	denied
	// failedClosed: the store failed and the policy fails closed.
	failedClosed
	// known: it would admit, but spent nothing: peeked after another policy
	// denied, or a member of a batch that another member denied.
	known
	// refunded: admitted and spent, then given back because another policy
	// denied the request.
	refunded
)

// slot is one policy's per-request state.
type slot struct {
	req Request
	d   Decision
	o   outcome
	// peeked: decided by Peek; twin: decided by the in-process twin while
	// the store failed (on_store_error: local); skipped: the store's
	// breaker was open, so the store was not asked and on_store_error
	// decided; lat: the limiter's latency; storeErr and refundErr: what
	// failed.
	peeked    bool
	twin      bool
	skipped   bool
	lat       time.Duration
	storeErr  error
	refundErr error
	// ovrErr: the policy's override read failed (overrides.go); ovrFail:
	// so on_store_error decides, not the limiter; ovrSkipped: the override
	// store's breaker was open.
	ovrErr              error
	ovrFail, ovrSkipped bool
	// bud is the budget context of the policy's first store call, in the
	// Verdict's allocation; nil once used.
	bud *budgetCtx
	// wait is how long the request waited for the turn the policy
	// reserved (max_delay; wait.go).
	wait time.Duration
}

// requests fills each policy's Request in slots, or renders a 400 for a
// missing or unusable key and reports false.
func (e *Engine) requests(ctx context.Context, rs *routeSet, in *Input, v *Verdict, slots []slot) bool {
	at := e.now()
	var buf [96]byte
	for _, c := range rs.policies {
		raw, err := rawKey(c.Policy, in, buf[:0])
		if err != nil {
			if c.Shadow {
				continue // never block for a shadow policy
			}
			e.log.LogAttrs(ctx, slog.LevelInfo, "edgelimit: request without a usable key",
				slog.String("policy", c.Name), slog.String("route", rs.label), slog.String("reason", err.Error()))
			badRequest(v, missingKeyDetail(c.Policy, err))
			return false
		}
		req := Request{Key: e.keyFor(v, c.compiled, raw), Cost: c.Cost, At: at, Header: in.Header}
		if c.ChargeAfter || c.finisher != nil { // a Finisher (inflight) holds its units until the response
			req.Cost = reserved(ctx, c.compiled)
		}
		if c.Tiers != nil {
			l, err := tier(c.Policy, in)
			if err != nil {
				if c.Shadow {
					continue
				}
				e.log.LogAttrs(ctx, slog.LevelInfo, "edgelimit: request names no known tier",
					slog.String("policy", c.Name), slog.String("route", rs.label))
				badRequest(v, unknownTierDetail(c.Policy))
				return false
			}
			req.Limits = l
		}
		if c.overrides != nil {
			e.applyOverride(ctx, rs, c.compiled, &req, &slots[c.slot])
		}
		slots[c.slot].req = req
	}
	return true
}

// missingKeyDetail is the public detail of a 400 for a policy's missing or
// unusable key: what is required, never what was sent.
func missingKeyDetail(p *policy.Policy, err error) string {
	what := "a usable client key"
	switch p.Key.Kind() {
	case policy.KeyHeader:
		what = "the " + p.Key.Name() + " header"
	case policy.KeyClaim:
		what = "an authorizer claim " + strconv.Quote(p.Key.Name())
	case policy.KeyIP:
		what = "a valid source address"
	}
	if errors.Is(err, errBadKey) && p.Key.Kind() != policy.KeyIP {
		return "This endpoint requires " + what + " of at most " + strconv.Itoa(maxKeyLength) + " bytes of UTF-8."
	}
	return "This endpoint requires " + what + "."
}

// evaluate decides every policy of the route. Plain limiters are asked one
// by one, then each batch group atomically. Once one policy denies (or
// fails closed), the rest are peeked, so that the answer names every
// violated policy while the denied request spends nothing, and what the
// earlier ones spent is refunded. All of it shares one time budget, which
// starts with the request.
func (e *Engine) evaluate(ctx context.Context, rs *routeSet, v *Verdict, slots []slot) {
	start := time.Time{}
	if e.realClock && len(slots) > 0 {
		start = slots[0].req.At
	}
	if start.IsZero() {
		start = time.Now()
	}
	if e.bans != nil && e.banned(ctx, start, rs, slots) {
		return // a ban denies before any limiter is asked
	}
	blocked := false
	for _, c := range rs.plain {
		s := &slots[c.slot]
		if s.req.Key == "" {
			continue // shadow policy without a key
		}
		if e.overrideFailed(ctx, rs, c.compiled, s, blocked) {
			// decided by on_store_error
		} else if blocked {
			e.peekOne(ctx, start, rs, c.compiled, s)
			continue
		} else {
			// A policy that settles after the response reserves here (settle.go).
			e.allowOne(ctx, start, rs, c.compiled, s)
		}
		if (s.o == denied || s.o == failedClosed) && !c.Shadow {
			blocked = true
		}
	}
	// The groups that spent, to refund if a later one blocks: on the
	// stack for a route of up to four groups (a slice grown per request
	// was one allocation of every request of a batch-capable store).
	var spentBuf [4][]member
	spent := spentBuf[:0]
	for _, g := range rs.groups {
		if ok, b := e.overrideGroup(ctx, start, rs, g, slots, blocked); ok {
			if blocked = b; !b {
				spent = append(spent, g)
			}
			continue
		}
		switch {
		case blocked:
			for _, c := range g {
				e.peekOne(ctx, start, rs, c.compiled, &slots[c.slot])
			}
		case len(g) == 1:
			s := &slots[g[0].slot]
			e.allowOne(ctx, start, rs, g[0].compiled, s)
			blocked = s.o != allowed
		default:
			blocked = e.allowGroup(ctx, start, rs, g, slots)
		}
		if !blocked {
			spent = append(spent, g)
		}
	}
	if !blocked && rs.delays {
		blocked = e.wait(ctx, rs, slots) // gives back what was spent if cut
	}
	if blocked {
		e.refund(ctx, start, rs, rs.plain, slots)
		for _, g := range spent {
			e.refund(ctx, start, rs, g, slots)
		}
	} else if rs.finishes {
		v.finish = e.finishing(rs, slots)
		e.beforeReservations(rs, slots)
	}
	if blocked && e.bans != nil {
		e.countDenials(ctx, start, rs, slots)
	}
	if e.observe != nil {
		for _, c := range rs.policies {
			if s := &slots[c.slot]; s.o != notEvaluated || s.storeErr != nil || s.ovrErr != nil {
				e.emit(ctx, rs, c.compiled, s)
			}
		}
	}
}

// allowOne asks one limiter within the request's time budget and applies
// on_store_error to a failure.
func (e *Engine) allowOne(ctx context.Context, start time.Time, rs *routeSet, c *compiled, s *slot) {
	tk := c.breaker.admit(ctx, s.req.At)
	t0 := e.clockIfTimed()
	cctx := e.slotBudget(s, ctx, start, tk.budget(c.StoreTimeout))
	d, err := c.limiter.Allow(cctx, s.req)
	cctx.stop()
	res := resultOf(cctx, ctx, err)
	c.breaker.done(ctx, tk, res, err)
	s.lat = e.latency(t0, start, err)
	if err != nil {
		e.storeFailed(ctx, rs, c, s, err, tk == refused)
		return
	}
	d.Policy = c.Name
	s.d, s.o = d, outcomeOf(d)
	c.follow(res, s.req, d)
}

// follow tells the policy's in-process twin what the limiter decided with
// the store (res answered), so that it decides from there when the store
// fails. An answer from memory is not passed on: the twin shares what the
// limiter remembers (a deny cache), and a cached denial at a later instant
// would tell it less than the store's answer it came from (a bucket still
// empty now, where it has been refilling since).
func (c *compiled) follow(res callResult, req Request, d Decision) {
	if c.follower != nil && res == answered {
		c.follower.Follow(req, d)
	}
}

// peekOne asks a limiter, without spending, what it would answer. A
// limiter that cannot peek, or whose peek fails, is left out.
func (e *Engine) peekOne(ctx context.Context, start time.Time, rs *routeSet, c *compiled, s *slot) {
	if c.peek == nil || s.req.Key == "" {
		return
	}
	tk := c.breaker.admit(ctx, s.req.At)
	t0 := e.clockIfTimed()
	cctx := e.slotBudget(s, ctx, start, tk.budget(c.StoreTimeout))
	d, err := c.peek.Peek(cctx, s.req)
	cctx.stop()
	res := resultOf(cctx, ctx, err)
	c.breaker.done(ctx, tk, res, err)
	s.lat = e.latency(t0, start, err)
	s.peeked = true
	if err != nil {
		if tk == refused {
			// The store was not asked: left out, as a policy that cannot
			// peek is.
			s.skipped = true
			return
		}
		s.storeErr = err
		e.log.LogAttrs(ctx, slog.LevelWarn, "edgelimit: peek failed",
			slog.String("policy", c.Name), slog.String("route", rs.label), slog.String("error", err.Error()))
		return
	}
	d.Policy = c.Name
	s.d = d
	c.follow(res, s.req, d)
	s.o = known
	if !d.Allowed {
		s.o = denied
	}
}

func (e *Engine) allowGroup(ctx context.Context, start time.Time, rs *routeSet, g []member, slots []slot) (blocked bool) {
	var buf [8]BatchItem
	items := buf[:0]
	if len(g) > len(buf) {
		items = make([]BatchItem, 0, len(g))
	}
	budget := time.Duration(0)
	for _, c := range g {
		items = append(items, BatchItem{Limiter: c.batch, Request: slots[c.slot].req})
		budget = max(budget, c.StoreTimeout)
	}
	// The members share a store, and so its breaker.
	br := g[0].breaker
	tk := br.admit(ctx, slots[g[0].slot].req.At)
	t0 := e.clockIfTimed()
	cctx := e.budget(ctx, start, tk.budget(budget))
	got, err := g[0].batch.AllowBatch(cctx, items)
	cctx.stop()
	if err == nil && len(got) != len(g) {
		err = fmt.Errorf("edgelimit: AllowBatch returned %d decisions for %d requests", len(got), len(g))
	}
	res := resultOf(cctx, ctx, err)
	br.done(ctx, tk, res, err)
	lat := e.latency(t0, start, err)
	for i, c := range g {
		s := &slots[c.slot]
		s.lat = lat
		if err != nil {
			e.storeFailed(ctx, rs, c.compiled, s, err, tk == refused)
		} else {
			d := got[i]
			d.Policy = c.Name
			s.d, s.o = d, outcomeOf(d)
			c.follow(res, s.req, d)
		}
		if s.o != allowed {
			blocked = true
		}
	}
	if err == nil && blocked {
		// Nothing in the batch was spent: members that fit are known, not
		// to refund.
		for _, c := range g {
			if s := &slots[c.slot]; s.o == allowed {
				s.o = known
			}
		}
	}
	return blocked
}

func outcomeOf(d Decision) outcome {
	if d.Allowed {
		return allowed
	}
	return denied
}

// storeFailed applies the policy's on_store_error to a failed call. A call
// the store's open breaker refused (skipped) did not ask the store: it is
// neither logged nor counted as a store error (the breaker logged opening),
// and its decision's Reason says why.
func (e *Engine) storeFailed(ctx context.Context, rs *routeSet, c *compiled, s *slot, err error, skipped bool) {
	if skipped {
		s.skipped = true
	} else {
		s.storeErr = err
	}
	// A decision the store could not make: fail open claims the whole quota
	// for the window; fail closed, nothing until the retry.
	d := Decision{Policy: c.Name, Limit: c.q, Window: c.w, Degraded: true, Reset: time.Second, RetryAfter: time.Second}
	o := failedClosed
	switch {
	case c.OnStoreError == policy.FailOpen:
		d.Allowed, d.Remaining, d.Reset, d.RetryAfter, o = true, c.q, c.w, 0, allowed
	case c.OnStoreError == policy.FailLocal && c.local != nil:
		// The instance's own limiter decides: a denial is a real 429.
		if ld, lerr := c.local.Allow(ctx, s.req); lerr == nil {
			d = ld
			d.Policy, d.Degraded = c.Name, true
			s.twin = true
			o = outcomeOf(d)
		}
	}
	if !skipped && !s.ovrFail { // a failed override read logged itself
		e.log.LogAttrs(ctx, slog.LevelWarn, "edgelimit: store failed",
			slog.String("policy", c.Name), slog.String("route", rs.label), slog.String("strategy", c.StrategyName()),
			slog.String("on_store_error", c.OnStoreError.String()), slog.Float64("latency_ms", float64(s.lat.Microseconds())/1000), slog.String("error", err.Error()))
	}
	s.d, s.o = d, o
}

// refund gives back what the allowed members spent on a request that
// another policy blocked, each exactly what its decision spent (its
// Receipt). Degraded decisions spent nothing in the store. A refund that
// cannot land is logged and reported to Observe, never dropped silently;
// its units stay spent until they leave the window (under-admission, never
// over).
func (e *Engine) refund(ctx context.Context, start time.Time, rs *routeSet, cs []member, slots []slot) {
	for _, c := range cs {
		s := &slots[c.slot]
		if s.o != allowed {
			continue
		}
		r := c.refund
		if s.twin {
			r, _ = c.local.(Refunder)
		} else if s.d.Degraded {
			r = nil // failed open: nothing was spent
		}
		if r == nil {
			s.o = refunded
			continue
		}
		var tk ticket
		if !s.twin {
			tk = c.breaker.admit(ctx, e.now())
		}
		cctx := e.budget(ctx, start, tk.budget(c.StoreTimeout))
		err := r.Refund(cctx, s.req, s.d)
		cctx.stop()
		if !s.twin {
			c.breaker.done(ctx, tk, resultOf(cctx, ctx, err), err)
		}
		if err != nil && tk == refused {
			err = fmt.Errorf("%w: %w", errBreakerOpen, err)
		}
		s.o = refunded
		if err != nil {
			s.refundErr = err
			e.log.LogAttrs(ctx, slog.LevelError, "edgelimit: refund failed",
				slog.String("policy", c.Name), slog.String("route", rs.label), slog.Int64("units", s.req.Units()),
				slog.String("error", err.Error()))
			continue
		}
		// The state after the refund: the units are back.
		s.d.Remaining = min(s.d.Remaining+s.req.Units(), max(s.d.Limit, s.d.Remaining))
	}
}

func (e *Engine) emit(ctx context.Context, rs *routeSet, c *compiled, s *slot) {
	e.observe(Event{Route: rs.label, Policy: c.Name, Strategy: c.StrategyName(), Allowed: s.d.Allowed, Shadow: c.Shadow,
		Peeked: s.peeked || s.o == known, Refunded: s.o == refunded, Degraded: s.d.Degraded, StoreError: s.storeErr,
		RefundError: s.refundErr, OverrideError: s.ovrErr, Latency: s.lat, Reason: reasonOf(s), Context: ctx, Key: s.req.Key, Wait: s.wait})
}

// clockIfTimed reads the clock for a latency, only when someone will read
// the latency (metrics); a store failure reads it anyway (see since).
func (e *Engine) clockIfTimed() time.Time {
	if e.observe == nil {
		return time.Time{}
	}
	return e.now()
}

// latency returns how long a call that started at t0 took. Only metrics
// (Observe) and the store-failure log use it: without metrics t0 is not
// read, and a failed call reports the time since the request started (the
// budget it used), so a decision that succeeds reads the clock once.
func (e *Engine) latency(t0, start time.Time, err error) time.Duration {
	switch {
	case !t0.IsZero():
		return e.now().Sub(t0)
	case err != nil:
		return time.Since(start)
	}
	return 0
}

// reasonOf says why a decision was not made by counting, for metrics.
func reasonOf(s *slot) string {
	switch {
	case s.skipped:
		return "breaker-open"
	case s.d.Degraded:
		return "degraded"
	}
	return s.d.Reason
}
