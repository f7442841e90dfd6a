package durablecounter_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// TestEngineWithCounters wires Counters on one memory store into the
// engine, as `edgelimit serve` does: the engine finds them batchable, so a
// denial by one policy spends nothing of the other, and the response
// carries each policy's quota.
func TestEngineWithCounters(t *testing.T) {
	file, err := policy.Parse("test.yaml", []byte(`version: 1
policies:
  - {name: daily, routes: ["GET /paid/*"], key: header:X-Api-Key, strategy: durable, limit: 5, window: 1d}
  - {name: burst, routes: ["GET /paid/*"], key: header:X-Api-Key, strategy: durable, limit: 2, window: 10s}
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := limitertest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	e, err := edgelimit.New(edgelimit.Config{
		Policies:   file,
		HashSecret: []byte(strings.Repeat("s", 32)),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:        clock.Now,
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: clock.Now})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	do := func() *edgelimit.Verdict {
		return e.Decide(context.Background(), &edgelimit.Input{
			Method: "GET", Path: "/paid/report", SourceIP: "203.0.113.7",
			Header: limitertest.Headers{"x-api-key": "key-1"},
		})
	}
	rateLimit := func(v *edgelimit.Verdict) string {
		for _, f := range v.Header() {
			if f.Name == "RateLimit" {
				return f.Value
			}
		}
		return ""
	}
	for i, want := range []string{`"daily";r=4;t=43200, "burst";r=1;t=10`, `"daily";r=3;t=43200, "burst";r=0;t=10`} {
		if v := do(); !v.Allowed || rateLimit(v) != want {
			t.Fatalf("request %d: allowed %v, RateLimit %q; want allowed, %q", i+1, v.Allowed, rateLimit(v), want)
		}
	}
	v := do()
	if v.Allowed || v.Status != 429 {
		t.Fatalf("third request: %+v, want 429", v)
	}
	var p limitertest.Problem
	if err := json.Unmarshal(v.Body, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "burst" {
		t.Errorf("violated-policies = %q, want [burst]", p.ViolatedPolicies)
	}
	if got, want := rateLimit(v), `"daily";r=3;t=43200, "burst";r=0;t=10`; got != want {
		t.Errorf("RateLimit of the 429 = %q, want %q (daily not spent by the denied request)", got, want)
	}
	clock.Advance(10 * time.Second) // burst's next window
	if v := do(); !v.Allowed || rateLimit(v) != `"daily";r=2;t=43190, "burst";r=1;t=10` {
		t.Errorf("after burst's window: allowed %v, RateLimit %q", v.Allowed, rateLimit(v))
	}
}
