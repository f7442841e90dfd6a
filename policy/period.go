package policy

// Calendar periods: a window that is a day, a week, a month or a year of a
// time zone's calendar (window: month, period_start: 15, time_zone:
// Europe/Berlin) rather than a duration.

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// PeriodUnit is the calendar unit of a period window.
type PeriodUnit uint8

// The units; the zero PeriodUnit is no period (the window is a duration).
const (
	NoPeriod PeriodUnit = iota
	Day
	Week
	Month
	Year
)

var unitNames = [...]string{"", "day", "week", "month", "year"}

// String returns the unit as a policy file writes it.
func (u PeriodUnit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("PeriodUnit(%d)", uint8(u))
}

// Nominal is the unit's usual length: what a policy's Window holds for it,
// and what its RateLimit-Policy announces when no period was decided (the
// store failed). A month is 30 days, a year 365.
func (u PeriodUnit) Nominal() time.Duration {
	switch u {
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// periodUnit reads a window's value as a calendar unit.
func periodUnit(s string) (PeriodUnit, bool) {
	for i, n := range unitNames {
		if i > 0 && n == strings.TrimSpace(s) {
			return PeriodUnit(i), true
		}
	}
	return NoPeriod, false
}

// Period is a calendar window: a day from midnight, a week from a weekday,
// a month from a day of the month (a billing day), or a year from a date,
// in a time zone. The zero Period is none. A Period is comparable: two
// equal Periods count in the same windows.
type Period struct {
	Unit PeriodUnit
	// Day is a month's first day (1-31; 29-31 in a shorter month is its
	// last day) or a year's anchor day of Month; 1 when unset.
	Day int
	// Month is a year's anchor month; January when unset.
	Month time.Month
	// Weekday is a week's first day; Monday unless set (Sunday is 0, so a
	// Period of a week keeps WeekSet to tell it from the default).
	Weekday time.Weekday
	WeekSet bool
	// Zone is the IANA time zone the calendar is of; "" is UTC.
	Zone string
}

// IsZero reports whether p is no period.
func (p Period) IsZero() bool { return p.Unit == NoPeriod }

// String describes p, like "month from day 15 (Europe/Berlin)".
func (p Period) String() string {
	var s string
	switch p.Unit {
	case NoPeriod:
		return ""
	case Day:
		s = "day"
	case Week:
		s = "week from " + p.weekday().String()
	case Month:
		s = "month from day " + strconv.Itoa(p.day())
	case Year:
		s = fmt.Sprintf("year from %02d-%02d", int(p.month()), p.day())
	}
	return s + " (" + p.zone() + ")"
}

// Tag names p in a store's items, so that counts of different periods never
// share an item, like "month.15@Europe/Berlin".
func (p Period) Tag() string {
	var s string
	switch p.Unit {
	case Day:
		s = "day"
	case Week:
		s = "week." + strconv.Itoa(int(p.weekday()))
	case Month:
		s = "month." + strconv.Itoa(p.day())
	case Year:
		s = fmt.Sprintf("year.%02d%02d", int(p.month()), p.day())
	}
	return s + "@" + p.zone()
}

func (p Period) day() int {
	if p.Day == 0 {
		return 1
	}
	return p.Day
}

func (p Period) month() time.Month {
	if p.Month == 0 {
		return time.January
	}
	return p.Month
}

func (p Period) weekday() time.Weekday {
	if !p.WeekSet {
		return time.Monday
	}
	return p.Weekday
}

func (p Period) zone() string {
	if p.Zone == "" {
		return "UTC"
	}
	return p.Zone
}

// Calendar is a Period with its time zone loaded: it finds the period an
// instant is in.
type Calendar struct {
	p   Period
	loc *time.Location
	// last is the period found last, which most instants are in.
	last atomic.Pointer[[2]int64]
}

// zones caches the loaded time zones, so that each is read once.
var zones sync.Map // name -> *time.Location

// LoadZone loads an IANA time zone ("" and "UTC" are UTC). It reads the
// system's zone database, or the one a program embeds by importing
// time/tzdata (the Lambda provided.al2023 runtime has none); "Local" is
// refused: it is each machine's own.
func LoadZone(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("policy: time_zone Local is each machine's own zone; name one, like Europe/Berlin")
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("policy: time_zone %q is not a time zone this program knows (an IANA name, like Europe/Berlin; a program on a system without a zone database, as Lambda's provided.al2023, must import time/tzdata)", name)
	}
	l, _ := zones.LoadOrStore(name, loc)
	return l.(*time.Location), nil
}

// Calendar returns p's calendar, or why its zone cannot be loaded.
func (p Period) Calendar() (*Calendar, error) {
	if p.IsZero() {
		return nil, fmt.Errorf("policy: no calendar period")
	}
	loc, err := LoadZone(p.Zone)
	if err != nil {
		return nil, err
	}
	return &Calendar{p: p, loc: loc}, nil
}

// Period returns the period c is the calendar of.
func (c *Calendar) Period() Period { return c.p }

// Bounds returns the period t is in, [start, end), as Unix nanoseconds.
// Periods start at midnight of their first day in the calendar's zone (or
// at the instant a time change makes of a midnight that does not exist),
// so a day across a change of the clocks is 23 or 25 hours long.
func (c *Calendar) Bounds(t int64) (start, end int64) {
	if b := c.last.Load(); b != nil && b[0] <= t && t < b[1] {
		return b[0], b[1]
	}
	tt := time.Unix(0, t).In(c.loc)
	at := c.starts(tt)
	// at(0) is the period of t's date; a time change at midnight can put it
	// a little after t, or its successor at or before t.
	k := 0
	for at(k) > t {
		k--
	}
	for at(k+1) <= t {
		k++
	}
	start, end = at(k), at(k+1)
	c.last.Store(&[2]int64{start, end})
	return start, end
}

// Window returns the bounds of t's period as times in the calendar's zone.
func (c *Calendar) Window(t time.Time) (start, end time.Time) {
	s, e := c.Bounds(t.UnixNano())
	return time.Unix(0, s).In(c.loc), time.Unix(0, e).In(c.loc)
}

// starts returns the start of the k-th period from the one of t's local
// date.
func (c *Calendar) starts(t time.Time) func(k int) int64 {
	y, m, d := t.Date()
	loc := c.loc
	midnight := func(y int, m time.Month, d int) int64 { return time.Date(y, m, d, 0, 0, 0, 0, loc).UnixNano() }
	switch c.p.Unit {
	case Day:
		return func(k int) int64 { return midnight(y, m, d+k) }
	case Week:
		d0 := d - (int(t.Weekday())-int(c.p.weekday())+7)%7
		return func(k int) int64 { return midnight(y, m, d0+7*k) }
	case Month:
		day := c.p.day()
		if d < min(day, daysIn(y, m)) {
			m-- // t's date is before this month's start: its period began last month
		}
		return func(k int) int64 {
			yy, mm := y, m+time.Month(k)
			n := time.Date(yy, mm, 1, 0, 0, 0, 0, time.UTC)
			yy, mm = n.Year(), n.Month()
			return midnight(yy, mm, min(day, daysIn(yy, mm)))
		}
	default: // Year
		am, ad := c.p.month(), c.p.day()
		if m < am || m == am && d < min(ad, daysIn(y, am)) {
			y--
		}
		return func(k int) int64 { return midnight(y+k, am, min(ad, daysIn(y+k, am))) }
	}
}

// daysIn returns the number of days of month m of year y.
func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// The policy file's side: window: day|week|month|year, period_start and
// time_zone, for the policy and its tiers.

// parsePeriodStart checks period_start's form; finishPeriods reads it once
// every window (the policy's, its tiers') is known.
func parsePeriodStart(p *fileParser, pol *Policy, v *Node) {
	if v.Kind != ScalarNode || strings.TrimSpace(v.Value) == "" {
		p.errorf(v.Line, pol.Name, "period_start must be a day of the month (15), a weekday (monday), a month and day (04-01) or a date (2026-01-15)")
		return
	}
}

func parseTimeZone(p *fileParser, pol *Policy, v *Node) {
	s, ok := p.str(v, pol.Name, "time_zone")
	if !ok {
		return
	}
	if _, err := LoadZone(s); err != nil {
		p.errorf(v.Line, pol.Name, "%s", strings.TrimPrefix(err.Error(), "policy: "))
		return
	}
	if s == "UTC" {
		s = ""
	}
	pol.Period.Zone = s
}

// finishPeriods applies period_start and time_zone to the policy's period
// and its tiers', and refuses them on a policy whose windows are all
// durations, or a period_start no calendar window of it can use.
func (p *fileParser) finishPeriods(pol *Policy, fields map[string]*Node, line int) {
	start, zoneSet := fields["period_start"], fields["time_zone"]
	if start != nil && (start.Kind != ScalarNode || strings.TrimSpace(start.Value) == "") {
		start = nil // said by parsePeriodStart
	}
	units := map[PeriodUnit]bool{}
	if !pol.Period.IsZero() {
		units[pol.Period.Unit] = true
	}
	if pol.Tiers != nil {
		for _, l := range pol.Tiers.Levels {
			if !l.Period.IsZero() {
				units[l.Period.Unit] = true
			}
		}
	}
	if len(units) == 0 {
		if start != nil {
			p.errorf(start.Line, pol.Name, "period_start applies only to a calendar window (window: day, week, month or year)")
		}
		if zoneSet != nil {
			p.errorf(zoneSet.Line, pol.Name, "time_zone applies only to a calendar window (window: day, week, month or year)")
		}
		pol.Period.Zone = ""
		return
	}
	if pol.Strategy != nil && !pol.Strategy.Calendar {
		p.errorf(line, pol.Name, "a calendar window (day, week, month, year) needs strategy durable (algorithm fixed-window); strategy %s counts durations only", pol.Strategy.Name)
	}
	zone := pol.Period.Zone
	apply := func(q Period) Period {
		if q.IsZero() {
			return q
		}
		q.Zone = zone
		if v := start; v != nil {
			var err error
			if q, err = withStart(q, v.Value); err != nil {
				p.errorf(v.Line, pol.Name, "%s", err)
			}
		}
		return q
	}
	pol.Period = apply(pol.Period)
	if pol.Tiers != nil {
		for name, l := range pol.Tiers.Levels {
			l.Period = apply(l.Period)
			pol.Tiers.Levels[name] = l
		}
	}
}

// withStart sets q's start from a period_start value: a day of the month
// (month), a weekday (week), MM-DD (year), or a date, YYYY-MM-DD, which
// names all three (its day of the month, its weekday, its month and day).
// A day has none: it starts at midnight.
func withStart(q Period, s string) (Period, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if date, err := time.Parse("2006-01-02", s); err == nil {
		switch q.Unit {
		case Day:
			return q, fmt.Errorf("period_start %s: a day starts at midnight and takes no period_start", s)
		case Week:
			q.Weekday, q.WeekSet = date.Weekday(), true
		case Month:
			q.Day = date.Day()
		case Year:
			q.Month, q.Day = date.Month(), date.Day()
		}
		return q, nil
	}
	switch q.Unit {
	case Day:
		return q, fmt.Errorf("period_start %s: a day starts at midnight and takes no period_start", s)
	case Week:
		for d := time.Sunday; d <= time.Saturday; d++ {
			if s == strings.ToLower(d.String()) {
				q.Weekday, q.WeekSet = d, true
				return q, nil
			}
		}
		return q, fmt.Errorf("period_start %q of a week must be a weekday, like monday, or a date", s)
	case Month:
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 31 {
			return q, fmt.Errorf("period_start %q of a month must be a day of the month, 1-31 (29-31 is the last day of a shorter month), or a date", s)
		}
		q.Day = n
		return q, nil
	default: // Year
		md, err := time.Parse("01-02", s)
		if err != nil {
			// 02-29 is not a date of every year: time.Parse refuses it.
			if s == "02-29" {
				q.Month, q.Day = time.February, 29
				return q, nil
			}
			return q, fmt.Errorf("period_start %q of a year must be a month and day, like 04-01, or a date", s)
		}
		q.Month, q.Day = md.Month(), md.Day()
		return q, nil
	}
}
