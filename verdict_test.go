package edgelimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// TestReleaseKeepsWhatMayStillBeHeld: Release does not reuse a Verdict
// the handler looked up (FromContext), nor one whose budget context a
// limiter asked for its Done channel (a real context and timer, which
// something may still hold); the context a handler kept without looking
// the Verdict up no longer carries one after Release.
func TestReleaseKeepsWhatMayStillBeHeld(t *testing.T) {
	f, err := policy.Parse("v.yaml", []byte(`version: 1
policies:
  - {name: v, routes: ["GET /v"], key: ip, strategy: durable, limit: 100, window: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	waits := false
	l := limitertest.LimiterFunc(func(ctx context.Context, _ edgelimit.Request) (edgelimit.Decision, error) {
		if waits {
			select {
			case <-ctx.Done():
			default:
			}
		}
		return edgelimit.Decision{Allowed: true, Limit: 100, Window: time.Hour, Remaining: 99, Reset: time.Hour}, nil
	})
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)),
		Logger: slog.New(slog.DiscardHandler), Limiters: func(*policy.Policy) (edgelimit.Limiter, error) { return l, nil }})
	if err != nil {
		t.Fatal(err)
	}
	in := &edgelimit.Input{Method: "GET", Path: "/v", SourceIP: "192.0.2.7"}

	v := e.Decide(context.Background(), in)
	ctx := v.Context(context.Background())
	if got, ok := edgelimit.FromContext(ctx); !ok || got != v {
		t.Fatalf("FromContext during the request = %p, %v; want %p", got, ok, v)
	}
	values := v.Values(0)[0]
	v.Release()
	if edgelimit.Reused(e, v) {
		t.Error("a Verdict the handler looked up was put back for reuse")
	}
	if got, ok := edgelimit.FromContext(ctx); !ok || got != v || v.Route != "GET /v" || v.Values(0)[0] != values {
		t.Errorf("after Release, the looked-up Verdict reads %+v (FromContext %v); want it unchanged", v, ok)
	}

	v = e.Decide(context.Background(), in)
	kept := v.Context(context.Background())
	v.Release()
	if got, ok := edgelimit.FromContext(kept); ok {
		t.Errorf("a context kept past Release still carries a Verdict: %p", got)
	}

	waits = true
	v = e.Decide(context.Background(), in)
	v.Release()
	if edgelimit.Reused(e, v) {
		t.Error("a Verdict whose budget context was started was put back for reuse")
	}
}

// TestDenialBodyFastPath: the precomputed 429 body of one violated policy
// is byte for byte the general one, for names JSON and Go quote alike.
func TestDenialBodyFastPath(t *testing.T) {
	for _, name := range []string{"bench", `q"uote`, "<tag>&", "ünï", "tab\there", "a\\b"} {
		for _, secs := range []int64{1, 2, 2592000} {
			fast, general := edgelimit.DenialBodies(name, secs)
			if fast != general {
				t.Errorf("policy %q, %d s:\nfast    %s\ngeneral %s", name, secs, fast, general)
			}
		}
	}
}

// TestReleaseClearsEverything: a Verdict Release puts back holds nothing
// of its request but its reusable buffers, after an allowed request with
// its header fields, a denied one with its body, and one with more header
// fields than the Verdict holds inline (two policies, legacy headers).
func TestReleaseClearsEverything(t *testing.T) {
	for _, tc := range []struct{ name, yaml string }{
		{"one policy", `version: 1
policies:
  - {name: v, routes: ["GET /v"], key: ip, strategy: durable, limit: 1, window: 1h}
`},
		{"two policies", `version: 1
policies:
  - {name: v, routes: ["GET /v"], key: ip, strategy: durable, limit: 1, window: 1h}
  - {name: w, routes: ["GET /v"], key: ip, strategy: durable, limit: 5, window: 1m}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := policy.Parse("v.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
			e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)),
				Logger: slog.New(slog.DiscardHandler), Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
					return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
				}})
			if err != nil {
				t.Fatal(err)
			}
			// Under -race a sync.Pool drops a quarter of what it is given:
			// a case is tried until its Verdict was put back.
			check := func(what string, ip string, want bool) {
				t.Helper()
				for try := range 100 {
					if want {
						ip = fmt.Sprintf("198.51.100.%d", try) // a fresh key (IPv6 keys are /64s), for another admission
					}
					v := e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/v", SourceIP: ip})
					if v.Allowed != want || len(v.Header()) == 0 || !want && len(v.Body) == 0 {
						t.Fatalf("%s: allowed %v with %d fields and a %d-byte body; want allowed %v", what, v.Allowed, len(v.Header()), len(v.Body), want)
					}
					v.Release()
					switch left := edgelimit.ReleasedClean(e); left {
					case "nothing was put back":
						continue
					case "":
						return
					default:
						t.Fatalf("%s: the Verdict put back still holds %s", what, left)
					}
				}
				t.Fatalf("%s: no Verdict was put back in 100 tries", what)
			}
			check("allowed", "2001:db8::1", true)
			e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/v", SourceIP: "2001:db8::2"}).Release()
			check("denied", "2001:db8::2", false)
		})
	}
}
