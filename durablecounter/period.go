package durablecounter

import (
	"fmt"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// Calendar periods (window: day, week, month or year; policy.Period): the
// fixed window's windows are then a calendar's periods instead of
// epoch-aligned durations. The rule is the fixed window's (fixedwindow.go)
// with start and end from the calendar; its item is the fixed window's,
// named by the period's start instant in seconds, and expires at the
// period's end (plus the margin):
//
//	fw#<policy>#<keyhash>#<period start, Unix seconds>
//
// A tier or an override whose window is another period (or a duration on
// a period policy) counts in items of its own, as every other window does:
// fw#<policy>/<window ms>/<period tag>#..., where the tag names the unit,
// its start and its zone (month.15@Europe/Berlin).
//
// Only the fixed window counts periods. The others slide: a sliding window
// weighs the previous period's count by how much of it the window still
// covers, which over periods of different lengths (28 to 31 days, a 23-hour
// day) is no rule a client can predict; a sliding log keeps every admitted
// millisecond of a month; gcra's rate (limit per 30 days) has no period's
// boundary to reset at. A quota of the calendar is a count that starts
// afresh at the boundary, which is what the fixed window is.

// withPeriod returns l with the calendar period p (none: l as it is); the
// window of a period is its unit's nominal length.
func withPeriod(l policy.Limits, p policy.Period) policy.Limits {
	if !p.IsZero() {
		l.Period, l.Window = p, p.Unit.Nominal()
	}
	return l
}

// calendar returns the calendar of l's period (nil for a duration), and
// adds the period's tag to the items' tag of a window not the policy's.
func (c *Counter) calendar(l policy.Limits, tag *string) (*policy.Calendar, error) {
	if l.Period.IsZero() {
		return nil, nil
	}
	if c.alg != FixedWindow {
		return nil, fmt.Errorf("%w: policy %q: window %s is a calendar period, which only algorithm fixed-window counts (%s)",
			limitsErr(c.base), c.name, l.Period.Unit, periodWhy)
	}
	cal, err := l.Period.Calendar()
	if err != nil {
		return nil, fmt.Errorf("%w: policy %q: %v", limitsErr(c.base), c.name, err)
	}
	if *tag != "" {
		*tag += "/" + l.Period.Tag()
	}
	return cal, nil
}

// periodWhy is why the sliding algorithms take no calendar period.
const periodWhy = "a sliding window over periods of 28 to 31 days, or of 23 to 25 hours, has no boundary a client can predict; use a duration"

// period sets a decision's Window to the length of t's period, which is
// what RateLimit-Policy's w announces: a 31-day month is w=2678400, a day
// the clocks change in is 23 or 25 hours.
func (f *fixedWindow) period(d *edgelimit.Decision, t int64) {
	if f.cal != nil {
		s, e := f.cal.Bounds(t)
		d.Window = time.Duration(e - s)
	}
}

// parsePeriods refuses a calendar window (the policy's or a tier's) for an
// algorithm other than the fixed window, at the line of the algorithm.
func parsePeriods(f *policy.Fields, o *Options) {
	if o.Algorithm == FixedWindow {
		return
	}
	p := f.Policy()
	unit := p.Period.Unit
	if p.Tiers != nil {
		for _, name := range p.Tiers.Names {
			if u := p.Tiers.Levels[name].Period.Unit; unit == policy.NoPeriod && u != policy.NoPeriod {
				unit = u
			}
		}
	}
	if unit != policy.NoPeriod {
		field := "algorithm"
		if !f.Has(field) {
			field = "window"
		}
		f.Errorf(field, "window %s is a calendar period, which only algorithm fixed-window counts: %s", unit, periodWhy)
	}
}
