package powgate_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/overrides"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/powgate"
)

// TestOperatorsReachTheGatedLimiter: an operator's reset and grant of a
// policy with proof_of_work reach the limiter behind the Gate, on durable
// and kv. Regression: Engine.Reset and Engine.Grant asserted the abilities
// on the Gate itself, which has none, and answered that the policy "keeps no
// usage to reset".
func TestOperatorsReachTheGatedLimiter(t *testing.T) {
	for _, strategy := range []string{"durable", "kv"} {
		t.Run(strategy, func(t *testing.T) {
			file := `version: 1
policies:
  - {name: api, routes: ["GET /api"], key: ip, strategy: ` + strategy + `, limit: 4, window: 1h, overrides: true, proof_of_work: {above: 3, bits: 8}}
`
			pf, err := policy.Parse("test.yaml", []byte(file))
			if err != nil {
				t.Fatal(err)
			}
			clock := limitertest.NewClock(time.Unix(1_700_000_000, 0))
			store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
			kv := kvbucket.NewMemory(kvbucket.MemoryConfig{Now: clock.Now})
			build := func(p *policy.Policy) (edgelimit.Limiter, error) {
				if strategy == "kv" {
					return kvbucket.New(kvbucket.Config{Policy: p, KV: kv, Now: clock.Now})
				}
				return durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: clock.Now})
			}
			e, err := edgelimit.New(edgelimit.Config{
				Policies: pf, HashSecret: []byte(strings.Repeat("h", 32)), Now: clock.Now, Overrides: overrides.NewMemory(clock.Now),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Limiters: powgate.Gating(build, powgate.Config{
					Secrets: [][]byte{bytes.Repeat([]byte{9}, 32)}, Now: clock.Now, Replay: pow.NewReplayCache(0),
				}),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			allowed := func() bool {
				v := e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/api", SourceIP: "192.0.2.1"})
				return v.Allowed
			}
			for i := range 3 {
				if !allowed() {
					t.Fatalf("request %d below the threshold: denied", i+1)
				}
			}
			if allowed() {
				t.Fatal("request 4, above the threshold without a proof: allowed")
			}
			if err := e.Reset(ctx, "api", "192.0.2.1"); err != nil {
				t.Fatalf("Reset of a gated policy: %v", err)
			}
			if !allowed() {
				t.Fatal("after the reset: denied")
			}
			if err := e.Grant(ctx, "api", "192.0.2.1", 5, time.Time{}); err != nil {
				t.Fatalf("Grant of a gated policy: %v", err)
			}
		})
	}
}
