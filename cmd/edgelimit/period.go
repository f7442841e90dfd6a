package main

import (
	"time"

	"github.com/edgelimit/edgelimit/policy"
)

// inForce returns the limits in force for a key: its override's, else its
// tier's (the default tier when tier is ""), else the policy's.
func inForce(p *policy.Policy, tier string, ovr policy.Limits, hasOverride bool) policy.Limits {
	l := policy.Limits{Limit: p.Limit, Window: p.Window, Period: p.Period}
	if p.Tiers != nil {
		if tier == "" {
			tier = p.Tiers.Default
		}
		if t, ok := p.Tiers.Levels[tier]; ok {
			l = t.Or(l)
		}
	}
	if hasOverride {
		l = ovr.Or(l)
	}
	return l
}

// periodEnd is the end of the calendar period l counts in at now, and
// whether l's window is one.
func periodEnd(l policy.Limits, now time.Time) (time.Time, bool) {
	if l.Period.IsZero() {
		return time.Time{}, false
	}
	cal, err := l.Period.Calendar()
	if err != nil {
		return time.Time{}, false
	}
	_, end := cal.Window(now)
	return end, true
}

// windowText is a window as check lists it: a duration, or a calendar
// period ("month from day 15 (Europe/Berlin)").
func windowText(w time.Duration, p policy.Period) string {
	if !p.IsZero() {
		return p.String()
	}
	return policy.FormatDuration(w)
}

// usageNow is the instant usage finds the period's end at (a test's clock).
var usageNow = time.Now
