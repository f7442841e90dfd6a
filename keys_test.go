package edgelimit_test

import (
	"context"
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
)

// keyed records the keys a limiter is asked about; inProcess says what it
// answers to edgelimit.InProcess (nil: it has no such method).
type keyed struct {
	edgelimit.Limiter
	keys []string
}

func (k *keyed) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	k.keys = append(k.keys, req.Key)
	return k.Limiter.Allow(ctx, req)
}

type keyedInProcess struct{ *keyed }

func (keyedInProcess) InProcess() bool { return true }

// TestKeyOfIsTheRequestsKeyEitherHash: whichever hash a policy's keys get (SipHash
// for a limiter whose state never leaves the process, HMAC for every
// other), Engine.KeyOf, which the operator commands use, computes the key
// the requests' limiter saw; the HMAC form is the stored one, and a policy
// with overrides keeps it even on an in-process limiter (the override
// store is keyed by it).
func TestKeyOfIsTheRequestsKeyEitherHash(t *testing.T) {
	f, err := policy.Parse("keys.yaml", []byte(`version: 1
policies:
  - {name: stored, routes: ["GET /a"], key: header:X-Api-Key, strategy: durable, limit: 100, window: 1h}
  - {name: local, routes: ["GET /a"], key: header:X-Api-Key, strategy: durable, limit: 100, window: 1h}
  - {name: local-overrides, routes: ["GET /a"], key: header:X-Api-Key, strategy: durable, limit: 100, window: 1h, overrides: true}
  - {name: local-ip, routes: ["GET /a"], key: ip, strategy: durable, limit: 100, window: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	free := limitertest.LimiterFunc(func(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
		return edgelimit.Decision{Allowed: true, Limit: 100, Window: time.Hour, Remaining: 99}, nil
	})
	got := map[string]*keyed{}
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)), Logger: slog.New(slog.DiscardHandler),
		Overrides: overrides.NewMemory(nil),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			k := &keyed{Limiter: free}
			got[p.Name] = k
			if p.Name == "stored" {
				return k, nil
			}
			return keyedInProcess{k}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	in := &edgelimit.Input{Method: "GET", Path: "/a", SourceIP: "203.0.113.9", Header: limitertest.Headers{"x-api-key": " key-1 "}}
	if v := e.Decide(context.Background(), in); !v.Allowed {
		t.Fatalf("Decide: %+v", v)
	}
	for _, tt := range []struct {
		policy, raw, rawKey string
		hmac                bool
	}{
		{"stored", "key-1", "h:key-1", true},
		{"local", "key-1", "h:key-1", false},
		{"local-overrides", "key-1", "h:key-1", true},
		{"local-ip", "203.0.113.9", "i:203.0.113.9/32", false},
	} {
		k, err := e.KeyOf(tt.policy, tt.raw)
		if err != nil {
			t.Fatal(err)
		}
		if seen := got[tt.policy].keys; len(seen) != 1 || seen[0] != k {
			t.Errorf("policy %s: KeyOf(%q) = %q, the limiter saw %q", tt.policy, tt.raw, k, seen)
		}
		if isHMAC := k == edgelimitHash(t, tt.policy, tt.rawKey); isHMAC != tt.hmac {
			t.Errorf("policy %s: key %q is the HMAC form: %v, want %v", tt.policy, k, isHMAC, tt.hmac)
		}
	}
}

// TestMemoryStoresAreInProcess: the in-memory stores of durablecounter and
// kvbucket report that their state never leaves the process, the others
// (a KV of the caller's, which could be shared) that it may.
func TestMemoryStoresAreInProcess(t *testing.T) {
	p := mustPolicy(t, "durable")
	c, err := durablecounter.New(durablecounter.Config{Policy: p, Store: durablecounter.NewMemory(durablecounter.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	if !c.InProcess() {
		t.Error("durablecounter on a Memory store: InProcess() = false")
	}
	kp := mustPolicy(t, "kv")
	b, err := kvbucket.New(kvbucket.Config{Policy: kp, KV: kvbucket.NewMemory(kvbucket.MemoryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	if !b.InProcess() {
		t.Error("kvbucket on a Memory KV: InProcess() = false")
	}
	wrapped, err := kvbucket.New(kvbucket.Config{Policy: kp, KV: struct{ kvbucket.KV }{kvbucket.NewMemory(kvbucket.MemoryConfig{})}})
	if err != nil {
		t.Fatal(err)
	}
	if wrapped.InProcess() {
		t.Error("kvbucket on a KV that does not say where it keeps its state: InProcess() = true")
	}
}

func mustPolicy(t *testing.T, strategy string) *policy.Policy {
	t.Helper()
	f, err := policy.Parse("p.yaml", []byte("version: 1\npolicies:\n  - {name: p, routes: [\"GET /a\"], key: ip, strategy: "+strategy+", limit: 10, window: 1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return f.Policies[0]
}
