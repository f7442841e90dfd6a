package inflight_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/memory"
)

// TestSetupMemory: setup/memory's InFlight backend builds the inflight
// policies of a file, on one store, at the instants BackendEnv.Now gives.
func TestSetupMemory(t *testing.T) {
	file, err := policy.Parse("p.yaml", []byte(`version: 1
policies:
  - {name: speech, routes: ["POST /tts"], key: ip, strategy: inflight, limit: 1, window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	factory, err := setup.Limiters(file, []setup.Backend{memory.InFlight()}, setup.BackendEnv{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	l, err := factory(file.Policies[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.(*inflight.Limiter); !ok {
		t.Fatalf("the backend built a %T", l)
	}
	ctx := context.Background()
	d, err := l.Allow(ctx, edgelimit.Request{Key: "k"})
	if err != nil || !d.Allowed || d.Receipt.At != t0.UnixNano() {
		t.Fatalf("first: %+v, %v", d, err)
	}
	if d, err := l.Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || d.Allowed {
		t.Fatalf("second: %+v, %v; want denied", d, err)
	}
}
