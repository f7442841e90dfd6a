package policy_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the tests' zones, whatever the system has

	"github.com/edgelimit/edgelimit/policy"
)

// at parses an instant written in RFC 3339.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The period of fixed instants: month ends of 28 to 31 days, leap years,
// billing days past a short month's end, and days and weeks across the
// clocks' changes.
func TestCalendarBounds(t *testing.T) {
	month := func(day int, zone string) policy.Period {
		return policy.Period{Unit: policy.Month, Day: day, Zone: zone}
	}
	tests := []struct {
		name       string
		p          policy.Period
		t          string
		start, end string
		hours      float64
	}{
		{"february of 28 days", month(1, ""), "2026-02-15T12:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24},
		{"february of a leap year", month(1, ""), "2024-02-15T12:00:00Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", 29 * 24},
		{"april of 30 days, last nanosecond", month(1, ""), "2026-04-30T23:59:59.999999999Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z", 30 * 24},
		{"january of 31 days", month(1, ""), "2026-01-31T23:59:59Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", 31 * 24},
		{"the boundary starts the next", month(1, ""), "2026-02-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24},
		{"december into january", month(1, ""), "2026-12-31T23:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", 31 * 24},
		{"billing day 15", month(15, ""), "2026-03-14T23:59:59Z", "2026-02-15T00:00:00Z", "2026-03-15T00:00:00Z", 28 * 24},
		{"billing day 15, January from December", month(15, ""), "2026-01-10T00:00:00Z", "2025-12-15T00:00:00Z", "2026-01-15T00:00:00Z", 31 * 24},
		{"billing day 31 in a 30-day month", month(31, ""), "2026-04-15T00:00:00Z", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z", 30 * 24},
		{"billing day 31 from April's last day", month(31, ""), "2026-04-30T00:00:00Z", "2026-04-30T00:00:00Z", "2026-05-31T00:00:00Z", 31 * 24},
		{"billing day 31 in February", month(31, ""), "2026-02-10T00:00:00Z", "2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z", 28 * 24},
		{"billing day 31 from February's last day", month(31, ""), "2026-02-28T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z", 31 * 24},
		{"billing day 31 in a leap February", month(31, ""), "2024-02-28T12:00:00Z", "2024-01-31T00:00:00Z", "2024-02-29T00:00:00Z", 29 * 24},
		{"billing day 31 from February 29", month(31, ""), "2024-02-29T12:00:00Z", "2024-02-29T00:00:00Z", "2024-03-31T00:00:00Z", 31 * 24},
		{"billing day 30 in February", month(30, ""), "2026-03-01T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-30T00:00:00Z", 30 * 24},
		{"billing day 29 in a common year", month(29, ""), "2025-02-28T01:00:00Z", "2025-02-28T00:00:00Z", "2025-03-29T00:00:00Z", 29 * 24},
		{"billing day 29 in a leap year", month(29, ""), "2024-02-28T01:00:00Z", "2024-01-29T00:00:00Z", "2024-02-29T00:00:00Z", 31 * 24},
		{"year of a leap year", policy.Period{Unit: policy.Year}, "2024-12-31T23:59:59Z", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z", 366 * 24},
		{"fiscal year from 04-01", policy.Period{Unit: policy.Year, Month: time.April, Day: 1}, "2026-03-31T00:00:00Z", "2025-04-01T00:00:00Z", "2026-04-01T00:00:00Z", 365 * 24},
		{"year from February 29, common year", policy.Period{Unit: policy.Year, Month: time.February, Day: 29}, "2025-06-01T00:00:00Z", "2025-02-28T00:00:00Z", "2026-02-28T00:00:00Z", 365 * 24},
		{"year from February 29, leap year", policy.Period{Unit: policy.Year, Month: time.February, Day: 29}, "2024-03-01T00:00:00Z", "2024-02-29T00:00:00Z", "2025-02-28T00:00:00Z", 365 * 24},
		{"week from Monday", policy.Period{Unit: policy.Week}, "2026-12-02T10:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z", 7 * 24},
		{"week from Sunday, on it", policy.Period{Unit: policy.Week, Weekday: time.Sunday, WeekSet: true}, "2026-12-06T00:00:00Z", "2026-12-06T00:00:00Z", "2026-12-13T00:00:00Z", 7 * 24},
		{"day in UTC", policy.Period{Unit: policy.Day}, "2026-12-02T10:00:00Z", "2026-12-02T00:00:00Z", "2026-12-03T00:00:00Z", 24},
		{"New York's day of 23 hours", policy.Period{Unit: policy.Day, Zone: "America/New_York"}, "2026-03-08T12:00:00-04:00", "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00", 23},
		{"New York's day of 25 hours", policy.Period{Unit: policy.Day, Zone: "America/New_York"}, "2026-11-01T01:30:00-05:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25},
		{"New York's day in UTC terms", policy.Period{Unit: policy.Day, Zone: "America/New_York"}, "2026-12-02T03:00:00Z", "2026-12-01T00:00:00-05:00", "2026-12-02T00:00:00-05:00", 24},
		{"Berlin's day of 23 hours", policy.Period{Unit: policy.Day, Zone: "Europe/Berlin"}, "2026-03-29T01:59:59+01:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23},
		{"Berlin's day of 25 hours", policy.Period{Unit: policy.Day, Zone: "Europe/Berlin"}, "2026-10-25T23:59:59+01:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25},
		{"Berlin's March of 743 hours", month(1, "Europe/Berlin"), "2026-03-31T23:30:00+02:00", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", 31*24 - 1},
		{"Berlin's billing day 15 across October's change", month(15, "Europe/Berlin"), "2026-11-01T00:00:00+01:00", "2026-10-15T00:00:00+02:00", "2026-11-15T00:00:00+01:00", 31*24 + 1},
		{"Berlin's week of 167 hours", policy.Period{Unit: policy.Week, Zone: "Europe/Berlin"}, "2026-03-29T12:00:00+02:00", "2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 167},
		{"a month in Berlin starts before UTC's", month(1, "Europe/Berlin"), "2026-11-30T23:30:00Z", "2026-12-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00", 31 * 24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cal, err := tt.p.Calendar()
			if err != nil {
				t.Fatal(err)
			}
			s, e := cal.Window(at(t, tt.t))
			if !s.Equal(at(t, tt.start)) || !e.Equal(at(t, tt.end)) {
				t.Errorf("%s at %s = [%s, %s), want [%s, %s)", tt.p, tt.t, s.Format(time.RFC3339), e.Format(time.RFC3339), tt.start, tt.end)
			}
			if h := e.Sub(s).Hours(); h != tt.hours {
				t.Errorf("%s at %s lasts %vh, want %vh", tt.p, tt.t, h, tt.hours)
			}
		})
	}
}

// Periods tile time: every instant is in exactly one, which starts at the
// end of the one before; in zones whose clocks change at midnight too
// (Santiago, Havana, Beirut), where a day's midnight may not exist.
func TestCalendarPeriodsTile(t *testing.T) {
	zones := []string{"", "America/New_York", "Europe/Berlin", "America/Santiago", "America/Havana", "Asia/Beirut", "Australia/Lord_Howe", "Pacific/Kiritimati"}
	periods := []policy.Period{{Unit: policy.Day}, {Unit: policy.Week, Weekday: time.Sunday, WeekSet: true}, {Unit: policy.Month, Day: 31}, {Unit: policy.Month, Day: 1},
		{Unit: policy.Year, Month: time.February, Day: 29}}
	rng := rand.New(rand.NewPCG(1, 2))
	lo, hi := at(t, "2020-01-01T00:00:00Z").UnixNano(), at(t, "2032-01-01T00:00:00Z").UnixNano()
	for _, z := range zones {
		for _, p := range periods {
			p.Zone = z
			cal, err := p.Calendar()
			if err != nil {
				t.Fatal(err)
			}
			for range 300 {
				x := lo + rng.Int64N(hi-lo)
				s, e := cal.Bounds(x)
				if !(s <= x && x < e) {
					t.Fatalf("%s: %d not in its period [%d, %d)", p, x, s, e)
				}
				if s2, e2 := cal.Bounds(s); s2 != s || e2 != e {
					t.Fatalf("%s: the start %d is in [%d, %d), not its own period", p, s, s2, e2)
				}
				if _, e0 := cal.Bounds(s - 1); e0 != s {
					t.Fatalf("%s: the period before [%d, %d) ends at %d", p, s, e, e0)
				}
				if s3, _ := cal.Bounds(e); s3 != e {
					t.Fatalf("%s: the period after [%d, %d) starts at %d", p, s, e, s3)
				}
			}
		}
	}
}

// The policy file's calendar windows: each field read, for the policy and
// its tiers.
func TestParsePeriods(t *testing.T) {
	head := "version: 1\npolicies:\n  - {name: a, routes: [\"GET /a\"], key: ip, strategy: durable, limit: 5, "
	tests := []struct {
		fields string
		want   policy.Period
		window time.Duration
	}{
		{"window: month", policy.Period{Unit: policy.Month}, 30 * 24 * time.Hour},
		{"window: month, period_start: 31", policy.Period{Unit: policy.Month, Day: 31}, 30 * 24 * time.Hour},
		{"window: month, period_start: 2026-01-15, time_zone: Europe/Berlin", policy.Period{Unit: policy.Month, Day: 15, Zone: "Europe/Berlin"}, 30 * 24 * time.Hour},
		{"window: week, period_start: sunday", policy.Period{Unit: policy.Week, Weekday: time.Sunday, WeekSet: true}, 7 * 24 * time.Hour},
		{"window: week, period_start: 2026-12-03", policy.Period{Unit: policy.Week, Weekday: time.Thursday, WeekSet: true}, 7 * 24 * time.Hour},
		{"window: year, period_start: 04-01", policy.Period{Unit: policy.Year, Month: time.April, Day: 1}, 365 * 24 * time.Hour},
		{"window: year, period_start: 02-29", policy.Period{Unit: policy.Year, Month: time.February, Day: 29}, 365 * 24 * time.Hour},
		{"window: day, time_zone: America/New_York", policy.Period{Unit: policy.Day, Zone: "America/New_York"}, 24 * time.Hour},
		{"window: day, time_zone: UTC", policy.Period{Unit: policy.Day}, 24 * time.Hour},
		{"window: 1d", policy.Period{}, 24 * time.Hour},
	}
	for _, tt := range tests {
		f, err := policy.Parse("p.yaml", []byte(head+tt.fields+"}\n"))
		if err != nil {
			t.Errorf("%s: %v", tt.fields, err)
			continue
		}
		if p := f.Policies[0]; p.Period != tt.want || p.Window != tt.window {
			t.Errorf("%s: period %+v window %s, want %+v %s", tt.fields, p.Period, p.Window, tt.want, tt.window)
		}
	}
	// A tier's calendar window takes the policy's period_start and time_zone.
	f, err := policy.Parse("p.yaml", []byte(head+`window: 1h, period_start: 2026-01-15, time_zone: Europe/Berlin,
     tiers: {by: "header:X-Plan", default: free, levels: {free: {}, pro: {limit: 1000, window: month}, team: {window: week}, hourly: {window: 2h}}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Policies[0]
	lv := p.Tiers.Levels
	if !p.Period.IsZero() || p.Window != time.Hour {
		t.Errorf("policy: period %+v window %s, want none and 1h", p.Period, p.Window)
	}
	if want := (policy.Limits{Limit: 1000, Window: 30 * 24 * time.Hour, Period: policy.Period{Unit: policy.Month, Day: 15, Zone: "Europe/Berlin"}}); lv["pro"] != want {
		t.Errorf("tier pro = %+v, want %+v", lv["pro"], want)
	}
	if want := (policy.Limits{Window: 7 * 24 * time.Hour, Period: policy.Period{Unit: policy.Week, Weekday: time.Thursday, WeekSet: true, Zone: "Europe/Berlin"}}); lv["team"] != want {
		t.Errorf("tier team = %+v, want %+v", lv["team"], want)
	}
	if want := (policy.Limits{Window: 2 * time.Hour}); lv["hourly"] != want || !lv["free"].IsZero() {
		t.Errorf("tiers hourly = %+v, free = %+v", lv["hourly"], lv["free"])
	}
	// A tier with only a limit keeps the policy's period.
	if l := (policy.Limits{Limit: 7}).Or(policy.Limits{Limit: 5, Window: time.Hour, Period: policy.Period{Unit: policy.Day}}); l.Period.Unit != policy.Day || l.Window != time.Hour {
		t.Errorf("Or kept %+v, want the base's period", l)
	}
}

func TestParsePeriodErrors(t *testing.T) {
	pol := func(strategy, extra string) string {
		return "version: 1\npolicies:\n  - name: a\n    routes: [\"GET /a\"]\n    key: ip\n    strategy: " + strategy + "\n    limit: 5\n" + extra
	}
	tests := []struct{ name, file, want string }{
		{"period_start without a calendar window", pol("durable", "    window: 1h\n    period_start: 15\n"),
			`p.yaml:9: policy "a": period_start applies only to a calendar window (window: day, week, month or year)`},
		{"time_zone without a calendar window", pol("durable", "    window: 1h\n    time_zone: Europe/Berlin\n"),
			`p.yaml:9: policy "a": time_zone applies only to a calendar window`},
		{"unknown zone", pol("durable", "    window: month\n    time_zone: Mars/Olympus\n"),
			`p.yaml:9: policy "a": time_zone "Mars/Olympus" is not a time zone this program knows (an IANA name, like Europe/Berlin; a program on a system without a zone database, as Lambda's provided.al2023, must import time/tzdata)`},
		{"local zone", pol("durable", "    window: month\n    time_zone: Local\n"), `p.yaml:9: policy "a": time_zone Local is each machine's own zone`},
		{"billing day 32", pol("durable", "    window: month\n    period_start: 32\n"),
			`p.yaml:9: policy "a": period_start "32" of a month must be a day of the month, 1-31`},
		{"billing day 0", pol("durable", "    window: month\n    period_start: 0\n"), `period_start "0" of a month must be a day of the month`},
		{"weekday of a month", pol("durable", "    window: month\n    period_start: monday\n"), `period_start "monday" of a month`},
		{"day of a week", pol("durable", "    window: week\n    period_start: 3\n"), `p.yaml:9: policy "a": period_start "3" of a week must be a weekday`},
		{"bad year start", pol("durable", "    window: year\n    period_start: 13-01\n"), `period_start "13-01" of a year must be a month and day`},
		{"a day takes none", pol("durable", "    window: day\n    period_start: 2026-01-01\n"), `a day starts at midnight and takes no period_start`},
		{"empty period_start", pol("durable", "    window: month\n    period_start: \"\"\n"), `p.yaml:9: policy "a": period_start must be a day of the month`},
		{"a tier's day of a week", pol("durable", "    window: month\n    period_start: 15\n    tiers: {by: \"header:X\", default: a, levels: {a: {window: week}}}\n"),
			`period_start "15" of a week must be a weekday`},
		{"sliding window", pol("durable", "    window: month\n    algorithm: sliding-window\n"),
			`p.yaml:9: policy "a": window month is a calendar period, which only algorithm fixed-window counts: a sliding window over periods of 28 to 31 days`},
		{"gcra in a tier", pol("durable", "    window: 1h\n    algorithm: gcra\n    tiers: {by: \"header:X\", default: a, levels: {a: {window: year}}}\n"),
			`p.yaml:9: policy "a": window year is a calendar period, which only algorithm fixed-window counts`},
		{"kv", pol("kv", "    window: day\n"), `p.yaml:8: policy "a": a calendar window (day, week, month, year) needs strategy durable (algorithm fixed-window); strategy kv counts durations only`},
		{"signed", pol("signed", "    window: week\n"), `strategy signed counts durations only`},
		{"not a unit", pol("durable", "    window: months\n"), `window "months" is not a duration`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.Parse("p.yaml", []byte(tt.file))
			if err == nil {
				t.Fatalf("policy.Parse succeeded, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestPeriodString(t *testing.T) {
	for p, want := range map[policy.Period]string{
		{Unit: policy.Month, Day: 15, Zone: "Europe/Berlin"}: "month from day 15 (Europe/Berlin)",
		{Unit: policy.Month}:                                     "month from day 1 (UTC)",
		{Unit: policy.Week}:                                      "week from Monday (UTC)",
		{Unit: policy.Year, Month: time.April, Day: 1}:           "year from 04-01 (UTC)",
		{Unit: policy.Day, Zone: "America/New_York"}:             "day (America/New_York)",
		{Unit: policy.Week, Weekday: time.Sunday, WeekSet: true}: "week from Sunday (UTC)",
		{}: "",
	} {
		if got := p.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", p, got, want)
		}
	}
}

// BenchmarkCalendarBounds measures finding an instant's period: "cached"
// is an instant in the period found last (every request but the first of a
// period, on one instance), "miss" alternates between two periods, which
// computes them in the zone each time.
//
//	go test -run '^$' -bench BenchmarkCalendarBounds -benchmem ./policy/
func BenchmarkCalendarBounds(b *testing.B) {
	cal, err := policy.Period{Unit: policy.Month, Day: 15, Zone: "Europe/Berlin"}.Calendar()
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			cal.Bounds(t0 + int64(i))
		}
	})
	b.Run("miss", func(b *testing.B) {
		b.ReportAllocs()
		month := int64(31 * 24 * time.Hour)
		for i := range b.N {
			cal.Bounds(t0 + int64(i&1)*month)
		}
	})
}
