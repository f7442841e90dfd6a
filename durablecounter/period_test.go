package durablecounter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // the tests' zones, whatever the system has

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// Calendar periods (window: month, period_start, time_zone) through the
// engine, at fixed instants, on the memory stores and each real server.

func instant(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// step is one request at an instant and what its answer must say.
type periodStep struct {
	at                      string
	allowed                 bool
	rateLimit, policyHeader string
	retryAfter              string // "" when admitted
}

func runPeriodSteps(t *testing.T, e *edgelimit.Engine, clock *limitertest.Clock, key string, steps []periodStep) {
	t.Helper()
	for i, s := range steps {
		clock.Set(instant(t, s.at))
		v := get(e, "/p/x", key, "")
		if v.Allowed != s.allowed || headerOf(v, "RateLimit") != s.rateLimit || headerOf(v, "RateLimit-Policy") != s.policyHeader ||
			headerOf(v, "Retry-After") != s.retryAfter {
			t.Errorf("step %d at %s: allowed %v, RateLimit %q, RateLimit-Policy %q, Retry-After %q; want %v, %q, %q, %q", i, s.at,
				v.Allowed, headerOf(v, "RateLimit"), headerOf(v, "RateLimit-Policy"), headerOf(v, "Retry-After"),
				s.allowed, s.rateLimit, s.policyHeader, s.retryAfter)
		}
		v.Release()
	}
}

func secs(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// A monthly quota from billing day 31 in Berlin: February's period ends on
// its last day (28, or 29 in a leap year); t and Retry-After count to the
// boundary, w is the period's length; the count starts afresh at it.
func TestMonthlyQuotaFromBillingDay(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	t0 := instant(t, "2026-02-27T12:00:00+01:00")
	forEachQuotaBackend(t, func() time.Time { return t0 }, func(t *testing.T, b quotaBackend) {
		clock := limitertest.NewClock(t0) // each backend its own: they run in parallel
		e := quotaEngine(t, `version: 1
policies:
  - {name: monthly, routes: ["GET /p/*"], key: header:X-Api-Key, strategy: durable, limit: 2,
     window: month, period_start: 31, time_zone: Europe/Berlin, store_timeout: 30s}
`, b, clock.Now)
		// March's period has the clocks' change of March 29: an hour short.
		feb, mar := `"monthly";q=2;w=`+secs(28*day), `"monthly";q=2;w=`+secs(31*day-time.Hour)
		runPeriodSteps(t, e, clock, "k-2026", []periodStep{
			{"2026-02-27T12:00:00+01:00", true, `"monthly";r=1;t=43200`, feb, ""},
			{"2026-02-27T18:00:00+01:00", true, `"monthly";r=0;t=21600`, feb, ""},
			{"2026-02-27T23:59:59+01:00", false, `"monthly";r=0;t=1`, feb, "1"},
			// February 28 starts March's period, of 31 days to March 31.
			{"2026-02-28T00:00:00+01:00", true, `"monthly";r=1;t=` + secs(31*day-time.Hour), mar, ""},
			{"2026-03-30T22:00:00+02:00", true, `"monthly";r=0;t=7200`, mar, ""},
			{"2026-03-30T23:00:00+02:00", false, `"monthly";r=0;t=3600`, mar, "3600"},
			// March 31 starts April's, which ends on April 30: 30 days.
			{"2026-03-31T00:00:00+02:00", true, `"monthly";r=1;t=` + secs(30*day), `"monthly";q=2;w=` + secs(30*day), ""},
		})
		// 2028 is a leap year: January 31's period ends on February 29.
		leap, next := `"monthly";q=2;w=`+secs(29*day), `"monthly";q=2;w=`+secs(31*day-time.Hour)
		runPeriodSteps(t, e, clock, "k-2028", []periodStep{
			{"2028-02-28T12:00:00+01:00", true, `"monthly";r=1;t=43200`, leap, ""},
			{"2028-02-28T13:00:00+01:00", true, `"monthly";r=0;t=39600`, leap, ""},
			{"2028-02-28T23:00:00+01:00", false, `"monthly";r=0;t=3600`, leap, "3600"},
			{"2028-02-29T00:00:00+01:00", true, `"monthly";r=1;t=` + secs(31*day-time.Hour), next, ""},
			{"2028-03-01T00:00:00+01:00", true, `"monthly";r=0;t=` + secs(30*day-time.Hour), next, ""},
		})
	})
}

// A day in New York across the clocks' changes: 23 hours in March, 25 in
// November, and what a client is told counts to local midnight.
func TestDailyQuotaAcrossDST(t *testing.T) {
	t.Parallel()
	t0 := instant(t, "2026-03-08T00:30:00-05:00")
	forEachQuotaBackend(t, func() time.Time { return t0 }, func(t *testing.T, b quotaBackend) {
		clock := limitertest.NewClock(t0) // each backend its own: they run in parallel
		e := quotaEngine(t, `version: 1
policies:
  - {name: daily, routes: ["GET /p/*"], key: header:X-Api-Key, strategy: durable, limit: 1,
     window: day, time_zone: America/New_York, store_timeout: 30s}
`, b, clock.Now)
		runPeriodSteps(t, e, clock, "k", []periodStep{
			{"2026-03-08T00:30:00-05:00", true, `"daily";r=0;t=` + secs(22*time.Hour+30*time.Minute), `"daily";q=1;w=82800`, ""},
			{"2026-03-08T03:30:00-04:00", false, `"daily";r=0;t=` + secs(20*time.Hour+30*time.Minute), `"daily";q=1;w=82800`, secs(20*time.Hour + 30*time.Minute)},
			{"2026-03-09T00:00:00-04:00", true, `"daily";r=0;t=86400`, `"daily";q=1;w=86400`, ""},
			{"2026-11-01T00:00:00-04:00", true, `"daily";r=0;t=90000`, `"daily";q=1;w=90000`, ""},
			// 01:30 happens twice; the second one is an hour after the first.
			{"2026-11-01T01:30:00-05:00", false, `"daily";r=0;t=` + secs(22*time.Hour+30*time.Minute), `"daily";q=1;w=90000`, secs(22*time.Hour + 30*time.Minute)},
		})
	})
}

// Tiers and overrides with calendar periods: a tier's window may be a
// month on an hourly policy; an override that sets only a limit keeps the
// policy's month; one whose window is a period is refused (the override
// store keeps durations), and a duration override counts in its own
// window. Usage says the period's end.
func TestPeriodTiersAndOverrides(t *testing.T) {
	t.Parallel()
	t0 := instant(t, "2026-04-29T23:00:00Z")
	forEachQuotaBackend(t, func() time.Time { return t0 }, func(t *testing.T, b quotaBackend) {
		clock := limitertest.NewClock(t0) // each backend its own: they run in parallel
		e := quotaEngine(t, `version: 1
policies:
  - name: plans
    routes: ["GET /p/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 1
    window: 1h
    store_timeout: 30s
    tiers: {by: header:X-Plan, default: free, levels: {free: {}, pro: {limit: 3, window: month}}}
  - {name: billing, routes: ["GET /b/*"], key: header:X-Api-Key, strategy: durable, limit: 1,
     window: month, period_start: 15, overrides: true, override_staleness: 1s, store_timeout: 30s}
`, b, clock.Now)
		n := 0
		for ; n < 5; n++ {
			v := get(e, "/p/x", "pro-key", "pro")
			ok, rl, rp := v.Allowed, headerOf(v, "RateLimit"), headerOf(v, "RateLimit-Policy")
			v.Release()
			if !ok {
				if rl != `"plans";r=0;t=90000` || rp != `"plans";q=3;w=2592000` {
					t.Errorf("pro's denial: RateLimit %q, RateLimit-Policy %q; want t to the end of April, w its 30 days", rl, rp)
				}
				break
			}
		}
		if n != 3 {
			t.Errorf("pro admitted %d in April, want 3", n)
		}
		clock.Set(instant(t, "2026-05-01T00:00:00Z"))
		if v := get(e, "/p/x", "pro-key", "pro"); !v.Allowed || headerOf(v, "RateLimit-Policy") != `"plans";q=3;w=2678400` {
			t.Errorf("pro in May: allowed %v, RateLimit-Policy %q; want a new period of 31 days", v.Allowed, headerOf(v, "RateLimit-Policy"))
		}
		if v := get(e, "/p/x", "free-key", ""); !v.Allowed || headerOf(v, "RateLimit-Policy") != `"plans";q=1;w=3600` {
			t.Errorf("free: allowed %v, RateLimit-Policy %q; want the hour", v.Allowed, headerOf(v, "RateLimit-Policy"))
		}

		ctx := context.Background()
		if err := e.SetOverride(ctx, "billing", "big", policy.Limits{Limit: 4, Window: 30 * 24 * time.Hour, Period: policy.Period{Unit: policy.Month}}, time.Time{}); err == nil ||
			!strings.Contains(err.Error(), "an override's window is a duration") {
			t.Errorf("SetOverride with a period: %v, want a refusal", err)
		}
		if err := e.SetOverride(ctx, "billing", "big", policy.Limits{Limit: 4}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if err := e.SetOverride(ctx, "billing", "hourly", policy.Limits{Window: time.Hour}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		admitted := func(key string) (n int, rl string) {
			for range 10 {
				v := get(e, "/b/x", key, "")
				ok := v.Allowed
				rl = headerOf(v, "RateLimit")
				v.Release()
				if !ok {
					return n, rl
				}
				n++
			}
			return n, rl
		}
		// May 1 is in the period from April 15 to May 15: 14 days left.
		if n, rl := admitted("big"); n != 4 || rl != `"billing";r=0;t=`+secs(14*24*time.Hour) {
			t.Errorf("override limit 4: %d admitted, RateLimit %q; want 4, t to May 15", n, rl)
		}
		if n, rl := admitted("hourly"); n != 1 || rl != `"billing";r=0;t=3600` {
			t.Errorf("override window 1h: %d admitted, RateLimit %q; want 1, t to the hour's end", n, rl)
		}
		d, err := e.Usage(ctx, "billing", "big", "")
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != 0 || d.Reset != 14*24*time.Hour || d.Window != 30*24*time.Hour {
			t.Errorf("Usage = %+v, want nothing left, Reset to May 15, Window 30 days", d)
		}
	})
}

// 64 clients over two instances on one key of a monthly quota, at the last
// second of a period and the first of the next: exactly the limit in each.
func TestPeriodExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	t0 := instant(t, "2026-01-31T23:59:59+01:00")
	forEachQuotaBackend(t, func() time.Time { return t0 }, func(t *testing.T, b quotaBackend) {
		clock := limitertest.NewClock(t0) // each backend its own: they run in parallel
		const policies = `version: 1
policies:
  - {name: monthly, routes: ["GET /p/*"], key: header:X-Api-Key, strategy: durable, limit: 25,
     window: month, time_zone: Europe/Berlin, store_timeout: 30s}
`
		a, other := quotaEngine(t, policies, b, clock.Now), quotaEngine(t, policies, b, clock.Now)
		for _, at := range []string{"2026-01-31T23:59:59+01:00", "2026-02-01T00:00:00+01:00"} {
			clock.Set(instant(t, at))
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for i := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					e := a
					if i%2 == 1 {
						e = other
					}
					v := get(e, "/p/x", "shared", "")
					if v.Allowed {
						admitted.Add(1)
					}
					v.Release()
				}()
			}
			wg.Wait()
			if n := admitted.Load(); n != 25 {
				t.Errorf("%s: %d admitted, want exactly 25", at, n)
			}
		}
	})
}

// The item of a period is named by the period's start instant and expires
// at its end plus the store's margin, on each real server.
func TestPeriodItem(t *testing.T) {
	t.Parallel()
	if os.Getenv(ddbtest.EnvDynalite) == "" && os.Getenv(ddbtest.EnvMoto) == "" {
		t.Skip("no DynamoDB-API server (run the tests through internal/tools/testservers)")
	}
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		client, table, _ := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		f, err := policy.Parse("p.yaml", []byte(`version: 1
policies:
  - {name: monthly, routes: ["GET /p"], key: ip, strategy: durable, limit: 5, window: month, period_start: 31, time_zone: America/New_York}
`))
		if err != nil {
			t.Fatal(err)
		}
		now := instant(t, "2026-04-15T12:00:00-04:00")
		c, err := durablecounter.New(durablecounter.Config{Policy: f.Policies[0], Store: store, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := c.Allow(context.Background(), edgelimit.Request{Key: "k", Cost: 1, At: now}); err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
		start, end := instant(t, "2026-03-31T00:00:00-04:00"), instant(t, "2026-04-30T00:00:00-04:00")
		res, err := client.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Items) != 1 {
			t.Fatalf("%d items, want 1", len(res.Items))
		}
		it := res.Items[0]
		pk := it["pk"].(*types.AttributeValueMemberS).Value
		if want := fmt.Sprintf("fw#monthly#k#%d", start.Unix()); pk != want {
			t.Errorf("pk = %q, want %q (the period's start in seconds)", pk, want)
		}
		exp := it["expires_at"].(*types.AttributeValueMemberN).Value
		if want := strconv.FormatInt(end.Add(dynamostore.DefaultExpiryMargin).Unix(), 10); exp != want {
			t.Errorf("expires_at = %s, want %s (the period's end plus the margin)", exp, want)
		}
		// Another period (a tier's week) counts in items of its own, tagged.
		week := policy.Period{Unit: policy.Week, Zone: "America/New_York"}
		if d, err := c.Allow(context.Background(), edgelimit.Request{Key: "k", Cost: 1, At: now, Limits: policy.Limits{Window: 7 * 24 * time.Hour, Period: week}}); err != nil || !d.Allowed || d.Window != 7*24*time.Hour {
			t.Fatalf("Allow of a week = %+v, %v", d, err)
		}
		monday := instant(t, "2026-04-13T00:00:00-04:00")
		want := fmt.Sprintf("fw#monthly/604800000/week.1@America/New_York#k#%d", monday.Unix())
		if _, ok := itemsByPrefix(t, client, table)[want]; !ok {
			t.Errorf("no item %q: %v", want, itemsByPrefix(t, client, table))
		}
	})
}

// A refund goes back to its period's count while the period lasts, and
// gives nothing once it has ended.
func TestPeriodRefund(t *testing.T) {
	p := &policy.Policy{Name: "p", Limit: 1, Cost: 1, Period: policy.Period{Unit: policy.Month, Day: 31}}
	now := instant(t, "2026-02-27T23:00:00Z")
	c, err := durablecounter.New(durablecounter.Config{Policy: p, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := edgelimit.Request{Key: "k", Cost: 1, At: now}
	d, err := c.Allow(ctx, req)
	if err != nil || !d.Allowed || d.Reset != time.Hour || d.Window != 28*24*time.Hour {
		t.Fatalf("Allow = %+v, %v; want admitted, an hour to February 28", d, err)
	}
	if err := c.Refund(ctx, req, d); err != nil {
		t.Fatal(err)
	}
	if d, _ = c.Allow(ctx, req); !d.Allowed {
		t.Fatalf("after a refund: %+v, want admitted", d)
	}
	if d2, _ := c.Allow(ctx, req); d2.Allowed {
		t.Fatalf("the limit spent: %+v, want denied", d2)
	}
	now = instant(t, "2026-02-28T00:00:00Z")
	req.At = now
	if err := c.Refund(ctx, req, d); err != nil { // after its period: nothing to give back
		t.Fatal(err)
	}
	if d, _ = c.Allow(ctx, req); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("the next period: %+v, want admitted with nothing left (the old refund gave nothing)", d)
	}
	if d, _ = c.Allow(ctx, req); d.Allowed {
		t.Fatalf("the next period's second: %+v, want denied", d)
	}
}

// Only the fixed window counts periods: a Counter of another algorithm
// refuses a policy's period (ErrConfig) and a request's (ErrLimits).
func TestPeriodOnlyFixedWindow(t *testing.T) {
	month := policy.Period{Unit: policy.Month}
	for _, alg := range []durablecounter.Algorithm{durablecounter.SlidingWindow, durablecounter.SlidingLog, durablecounter.GCRA} {
		p := &policy.Policy{Name: "p", Limit: 5, Window: 30 * 24 * time.Hour, Period: month, Cost: 1}
		_, err := durablecounter.New(durablecounter.Config{Policy: p, Options: &durablecounter.Options{Algorithm: alg}})
		if !errors.Is(err, durablecounter.ErrConfig) || !strings.Contains(err.Error(), "only algorithm fixed-window counts") {
			t.Errorf("%s with a period: %v, want ErrConfig", alg, err)
		}
		p.Period, p.Window = policy.Period{}, time.Hour
		c, err := durablecounter.New(durablecounter.Config{Policy: p, Options: &durablecounter.Options{Algorithm: alg}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Allow(context.Background(), edgelimit.Request{Key: "k", Cost: 1, At: limitertest.T0, Limits: policy.Limits{Window: 30 * 24 * time.Hour, Period: month}})
		if !errors.Is(err, durablecounter.ErrLimits) {
			t.Errorf("%s with a request's period: %v, want ErrLimits", alg, err)
		}
	}
}

// BenchmarkAllowMemoryPeriod is BenchmarkAllowMemory's fixed window with
// time.Now under a duration (24h), a day of UTC and a month from a billing
// day in Europe/Berlin: what finding the period costs a decision.
//
//	go test -run '^$' -bench 'BenchmarkAllowMemoryPeriod' -benchmem ./durablecounter/
func BenchmarkAllowMemoryPeriod(b *testing.B) {
	for _, w := range []struct {
		name   string
		period policy.Period
	}{{"24h", policy.Period{}}, {"day-UTC", policy.Period{Unit: policy.Day}}, {"month-15-Berlin", policy.Period{Unit: policy.Month, Day: 15, Zone: "Europe/Berlin"}}} {
		b.Run(w.name, func(b *testing.B) {
			p := benchPolicy("bench", string(durablecounter.FixedWindow), 24*time.Hour)
			p.Period = w.period
			c, err := durablecounter.New(durablecounter.Config{Policy: p, Store: durablecounter.NewMemory(durablecounter.MemoryConfig{}), Now: time.Now})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for _, k := range benchKeys {
				if _, err := c.Allow(ctx, edgelimit.Request{Key: k}); err != nil {
					b.Fatal(err)
				}
			}
			runParallel(b, func(key string) error {
				_, err := c.Allow(ctx, edgelimit.Request{Key: key})
				return err
			})
		})
	}
}
