package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

const periodPolicies = `version: 1
policies:
  - name: api-monthly
    routes: ["GET /api/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 10000
    window: month
    period_start: 15
    tiers:
      by: header:X-Plan
      default: free
      levels: {free: {}, pro: {limit: 1000000}, hourly: {window: 1h}}
`

// A calendar period's end: usage prints it, a grant without --for lasts
// until it, check lists the period.
func TestUsageAndGrantOfAPeriod(t *testing.T) {
	f, err := policy.Parse("p.yaml", []byte(periodPolicies))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Policies[0]
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	old := usageNow
	usageNow = func() time.Time { return now }
	defer func() { usageNow = old }()

	d := edgelimit.Usage{Decision: edgelimit.Decision{Policy: p.Name, Limit: 10000, Window: 30 * 24 * time.Hour, Remaining: 9997, Reset: 14 * 24 * time.Hour, Allowed: true}, Quota: 9997}
	var out bytes.Buffer
	printUsage(&out, opFlags{}, p, d, policy.Limits{}, false)
	if want := "api-monthly  free  10000  30d     9997       14d (at 2026-05-15T00:00:00Z)  -"; !strings.Contains(out.String(), want) {
		t.Errorf("usage:\n%s\nwant a line %q", out.String(), want)
	}
	out.Reset()
	printUsage(&out, opFlags{json: true}, p, d, policy.Limits{Limit: 5}, true)
	if !strings.Contains(out.String(), `"reset_at":"2026-05-15T00:00:00Z"`) {
		t.Errorf("usage --json: %s, want reset_at", out.String())
	}
	out.Reset()
	// A tier whose window is a duration has no period's end to print.
	printUsage(&out, opFlags{tier: "hourly"}, p, edgelimit.Usage{Decision: edgelimit.Decision{Limit: 10000, Window: time.Hour, Reset: time.Hour}}, policy.Limits{}, false)
	if strings.Contains(out.String(), "(at ") {
		t.Errorf("usage of an hourly tier:\n%s\nwant no period's end", out.String())
	}

	end, err := windowEnd(context.Background(), nil, p, "k", now.Add(time.Hour))
	if err != nil || !end.Equal(time.Date(2026, 5, 15, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("a grant's default end = %s, %v; want the period's end, May 15", end, err)
	}

	out.Reset()
	printTable(&out, f)
	if !strings.Contains(out.String(), "month from day 15 (UTC)") {
		t.Errorf("check:\n%s\nwant the period", out.String())
	}
}
