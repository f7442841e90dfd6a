package durablecounter

import (
	"fmt"
	"strconv"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// The limits in force (the policy's, a tier's, an override's) and the
// algorithms a Counter builds for each: one per shard, with its share.

// maxVariants bounds the limits (tiers, overrides) a Counter keeps the
// algorithms of; beyond it, a request's algorithms are built for it alone.
const maxVariants = 1024

// variant is a Counter's algorithms for one set of limits in force.
type variant struct {
	// lim is the whole policy's limit, window and burst (gcra), before the
	// shards' shares.
	lim policy.Limits
	// qLimit and qWindow are what decisions tell the client (Limit and
	// Window): the limit and window, or for gcra with a burst other than
	// the limit, the burst over the time the bucket takes to fill.
	qLimit  int64
	qWindow time.Duration
	// algs has one algorithm per shard, each with its share of the limit.
	algs []algorithm
	// err: these limits cannot be enforced (a cached refusal).
	err error
	// period: the window is a calendar period, whose decisions each
	// announce the length of theirs (see period.go).
	period bool
}

// algorithmCode returns the code of alg, for New: every algorithm's. A
// switch rather than a map built at init, so that a program that builds
// its Counters with NewLinked, and never calls New, links only the
// algorithms it names (an unused algorithm is dead code to the linker).
func algorithmCode(alg Algorithm) (Code, bool) {
	switch alg {
	case FixedWindow:
		return FixedWindowCode, true
	case SlidingWindow:
		return SlidingWindowCode, true
	case SlidingLog:
		return SlidingLogCode, true
	case GCRA:
		return GCRACode, true
	}
	return Code{}, false
}

// params are the policy fields an algorithm uses, for one shard.
type params struct {
	name   string
	limit  int64
	window time.Duration
	burst  int64
	// tag names a window other than the policy's in the items of the
	// algorithms whose state is per window ("" for the policy's own), so
	// that counts of different windows never share an item.
	tag string
	// cal, if set, is the calendar of a period window (window: month).
	cal *policy.Calendar
	// delay is the policy's max_delay in nanoseconds (gcra only): how far
	// beyond its tolerance a request may be admitted for a later turn.
	delay int64
}

// share returns shard i's part of total split over n shards.
func share(total int64, n, i int) int64 {
	s := total / int64(n)
	if int64(i) < total%int64(n) {
		s++
	}
	return s
}

// build returns the algorithms of the whole policy's limits l (which New
// or effective completed), or the reason they cannot be enforced.
func (c *Counter) build(l policy.Limits) (*variant, error) {
	name := c.name
	switch {
	case l.Limit < 0 || l.Burst < 0:
		return nil, fmt.Errorf("%w: policy %q: limit %d and burst %d must not be negative", ErrLimits, name, l.Limit, l.Burst)
	case l.Window < time.Millisecond || l.Window%time.Millisecond != 0:
		return nil, fmt.Errorf("%w: policy %q: window %s must be a whole number of milliseconds, at least 1ms", ErrLimits, name, l.Window)
	}
	v := &variant{lim: l, qLimit: l.Limit, qWindow: l.Window}
	if c.alg == GCRA && l.Limit > 0 && l.Burst != l.Limit {
		// As the engine's RateLimit-Policy has always announced a bucket:
		// 10/s with burst 20 is q=20, w=2s, so Remaining never exceeds q.
		v.qLimit = l.Burst
		v.qWindow = time.Duration(float64(l.Window) * float64(l.Burst) / float64(l.Limit))
	}
	tag := ""
	if c.base != nil && (l.Window != c.base.lim.Window || l.Period != c.base.lim.Period) {
		tag = "/" + strconv.FormatInt(l.Window.Milliseconds(), 10)
	}
	cal, err := c.calendar(l, &tag)
	if err != nil {
		return nil, err
	}
	v.period = cal != nil
	newAlg := c.newAlg
	for i := range c.shards {
		sp := params{name: name, limit: share(l.Limit, c.shards, i), window: l.Window, burst: share(l.Burst, c.shards, i), tag: tag, cal: cal, delay: c.maxDelay}
		switch c.alg {
		case SlidingLog:
			if sp.limit > MaxSlidingLogLimit {
				return nil, fmt.Errorf("%w: policy %q: sliding-log keeps one attribute per admitted millisecond in one item, so its limit is at most %d per shard; use shards: %d or more, or sliding-window",
					limitsErr(c.base), name, MaxSlidingLogLimit, (l.Limit+MaxSlidingLogLimit-1)/MaxSlidingLogLimit)
			}
		case GCRA:
			if sp.limit > 0 {
				T := (int64(l.Window) + sp.limit - 1) / sp.limit
				if sp.burst > maxTolerance/T {
					return nil, fmt.Errorf("%w: policy %q: burst %d at %d per %s is a tolerance of more than 36 years", limitsErr(c.base), name, l.Burst, l.Limit, l.Window)
				}
			}
		}
		v.algs = append(v.algs, newAlg(sp))
	}
	return v, nil
}

// limitsErr is the sentinel of a refusal by build: ErrConfig for the
// policy's own limits (New), ErrLimits for a request's.
func limitsErr(base *variant) error {
	if base == nil {
		return ErrConfig
	}
	return ErrLimits
}

// effective completes a request's limits with the policy's: a zero field
// keeps the policy's, a block is a limit of 0, and gcra's burst follows the limit in force when the
// policy's burst is its limit (the default). The other algorithms have no
// burst.
func (c *Counter) effective(l policy.Limits) policy.Limits {
	b := c.base.lim
	out := policy.Limits{Limit: l.Limit, Window: l.Window, Burst: l.Burst, Period: l.Period}
	if out.Limit == 0 {
		out.Limit = b.Limit
	}
	switch {
	case !out.Period.IsZero(): // a calendar period: its window is its unit's
		out.Window = out.Period.Unit.Nominal()
	case out.Window == 0:
		out.Window, out.Period = b.Window, b.Period
	}
	if l.Block { // an operator's block: nothing is admitted
		out.Limit = 0
	}
	switch {
	case c.alg != GCRA:
		out.Burst = out.Limit
	case out.Burst != 0:
	case c.burstFollows:
		out.Burst = out.Limit
	default:
		out.Burst = b.Burst
	}
	return out
}

// variantFor returns the algorithms of the limits in force for req: the
// policy's, unless req.Limits (a tier, an override) changes them. A policy
// that no request changes pays one comparison for it.
func (c *Counter) variantFor(req edgelimit.Request) (*variant, error) {
	if req.Limits.IsZero() {
		return c.base, nil
	}
	return c.variantOf(c.effective(req.Limits))
}

func (c *Counter) variantOf(l policy.Limits) (*variant, error) {
	if l == c.base.lim {
		return c.base, nil
	}
	c.variants.mu.RLock()
	v, ok := c.variants.m[l]
	c.variants.mu.RUnlock()
	if !ok {
		var err error
		if v, err = c.build(l); err != nil {
			v = &variant{lim: l, err: err}
		}
		c.variants.mu.Lock()
		if len(c.variants.m) < maxVariants {
			if old, ok := c.variants.m[l]; ok {
				v = old
			} else {
				c.variants.m[l] = v
			}
		}
		c.variants.mu.Unlock()
	}
	return v, v.err
}

// told fills in what every decision tells the client: the policy's name
// and the quota in force (RateLimit-Policy's q and w), which Remaining
// never exceeds.
func (v *variant) told(name string, d *edgelimit.Decision) {
	d.Policy, d.Limit = name, v.qLimit
	if !v.period || d.Window == 0 {
		d.Window = v.qWindow
	}
	d.Remaining = min(d.Remaining, max(v.qLimit, 0))
}

// Quota returns what the Counter's decisions tell the client in
// RateLimit-Policy for the policy's own limits: the limit and window, or
// for gcra with a burst other than the limit, the burst over the time the
// bucket takes to fill. A tier or an override announces its own.
func (c *Counter) Quota() (limit int64, window time.Duration) { return c.base.qLimit, c.base.qWindow }
