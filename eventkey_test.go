package edgelimit_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/memory"
)

// TestEventKeyIsTheHashedKey: every decision's Event carries the policy's
// hashed client key, the one Engine.KeyOf computes for an operator (and a
// store keeps), never the raw key; an after-response charge carries it too.
func TestEventKeyIsTheHashedKey(t *testing.T) {
	f, err := policy.Parse("test.yaml", []byte(`version: 1
policies:
  - {name: burst, routes: ["GET /paid/*"], key: header:X-Api-Key, strategy: kv, limit: 1, window: 10s}
  - {name: daily, routes: ["GET /paid/*"], key: header:X-Api-Key, strategy: durable, limit: 5, window: 1d, charge: response}
  - {name: addr, routes: ["GET /paid/*"], key: ip, strategy: durable, limit: 5, window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	factory, err := setup.Limiters(f, []setup.Backend{memory.Durable(), memory.KV()}, setup.BackendEnv{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []edgelimit.Event
	e, err := edgelimit.New(edgelimit.Config{
		Policies: f, Limiters: factory, HashSecret: []byte(strings.Repeat("k", 32)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observe: func(ev edgelimit.Event) {
			ev.Key = strings.Clone(ev.Key) // valid only during the call
			ev.Context = nil
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		v := e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/paid/a", SourceIP: "192.0.2.7",
			Header: limitertest.Headers(map[string]string{"X-Api-Key": "secret-key-1"})})
		v.Finish(context.Background(), 200)
		v.Release()
	}
	want := map[string]string{}
	for p, raw := range map[string]string{"burst": "secret-key-1", "daily": "secret-key-1", "addr": "192.0.2.7"} {
		if want[p], err = e.KeyOf(p, raw); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	for _, ev := range events {
		if ev.Key != want[ev.Policy] {
			t.Errorf("%s event (reason %q): Key %q, want KeyOf %q", ev.Policy, ev.Reason, ev.Key, want[ev.Policy])
		}
		if strings.Contains(ev.Key, "secret-key-1") || strings.Contains(ev.Key, "192.0.2.7") {
			t.Errorf("%s event carries the raw key: %q", ev.Policy, ev.Key)
		}
		seen[ev.Policy+"/"+ev.Reason]++
	}
	if seen["burst/"] != 2 || seen["daily/after-response"] == 0 || seen["addr/"] == 0 {
		t.Errorf("events by policy/reason: %v; want two burst decisions, daily's charge after the response and addr's decisions", seen)
	}
}
