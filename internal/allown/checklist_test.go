package allown

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
)

// The proofs of CONTRIBUTING.md's steps for the allown strategy.

const head = "version: 1\npolicies:\n"

// Step 1: the parser test: the strategy's field read, its refusals at
// their lines, and the common fields that need an ability it lacks
// refused for it.
func TestParse(t *testing.T) {
	f, err := policy.Parse("p.yaml", []byte(head+"  - {name: a, routes: [\"GET /a\"], key: ip, strategy: allown, limit: 2, window: 1m, detail: \"Upgrade your plan.\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := *f.Policies[0].Options.(*Options), (Options{Detail: "Upgrade your plan."}); got != want {
		t.Errorf("Options = %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ name, fields, want string }{
		{"long detail", "detail: " + strings.Repeat("x", MaxDetail+1), `p.yaml:3: policy "a": detail is 201 bytes, more than 200`},
		{"detail on two lines", `detail: "a\nb"`, `p.yaml:3: policy "a": detail must be printable text on one line`},
		{"charge needs Charger", "charge: response", `p.yaml:3: policy "a": charge needs a strategy that can spend after the response; strategy allown cannot`},
		{"local needs Localizer", "on_store_error: local", `p.yaml:3: policy "a": on_store_error local needs a store to fall back from; strategy allown has none`},
		{"another strategy's field", "retry_after: 1s", `p.yaml:3: policy "a": unknown field "retry_after"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse("p.yaml", []byte(head+"  - {name: a, routes: [\"GET /a\"], key: ip, strategy: allown, limit: 2, window: 1m, "+tc.fields+"}\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want %q", err, tc.want)
			}
		})
	}
}

// Step 2: New's refusals wrap ErrConfig.
func TestNew(t *testing.T) {
	other := &policy.Strategy{Name: "other"}
	for _, p := range []*policy.Policy{nil, {Name: "a", Strategy: other, Limit: 1, Window: time.Minute}, {Name: "a", Limit: -1, Window: time.Minute}, {Name: "a", Limit: 1}} {
		if _, err := New(Config{Policy: p}); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", p, err)
		}
	}
}

// Step 3: the abilities it implements are the ones it declares.
func TestStrategyDeclaresItsAbilities(t *testing.T) {
	l, err := New(Config{Policy: &policy.Policy{Name: "a", Limit: 1, Window: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	limitertest.CheckAbilities(t, Strategy, l)
}

// Step 5: the conformance suite, fixed window, on the memory store.
func TestConformanceMemory(t *testing.T) {
	limitertest.Run(t, func(t *testing.T) limitertest.NewLimiter {
		store := NewMemory(MemoryConfig{})
		return func(s limitertest.Spec) (edgelimit.Limiter, error) {
			return New(Config{Policy: s.Policy, Store: store, Now: s.Now})
		}
	}, limitertest.Options{Algorithm: limitertest.FixedWindow, Refund: true, Peek: true, Concurrency: true})
}

// Step 6 (links, layers) applies to packages programs import; this one is
// compiled only by its tests.

// Step 7: its backend. setup finds the strategy through its package's
// value (Strategy), and the engine built from a policy file naming it
// admits the first limit requests of a key and refuses the next with the
// policy's detail.
type memoryBackend struct{}

func (memoryBackend) Strategy() *policy.Strategy { return Strategy }

func (memoryBackend) Open(env *setup.BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	store := NewMemory(MemoryConfig{})
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		return New(Config{Policy: p, Store: store, Now: env.Now})
	}, nil
}

func TestEngine(t *testing.T) {
	f, err := policy.Parse("p.yaml", []byte(head+"  - {name: trial, routes: [\"GET /trial\"], key: ip, strategy: allown, limit: 2, window: 1h, detail: \"Upgrade your plan.\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	clock := limitertest.NewClock(limitertest.T0)
	build, err := setup.Limiters(f, []setup.Backend{memoryBackend{}}, setup.BackendEnv{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e, err := edgelimit.New(edgelimit.Config{Policies: f, Limiters: build, HashSecret: []byte(strings.Repeat("k", 32)), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	in := &edgelimit.Input{Method: "GET", Path: "/trial", SourceIP: "192.0.2.1"}
	for i, want := range []int{0, 0, 429} {
		v := e.Decide(context.Background(), in)
		if v.Status != want {
			t.Fatalf("request %d: status %d, want %d", i+1, v.Status, want)
		}
		if want == 429 {
			var p struct{ Detail string }
			if err := json.Unmarshal(v.Body, &p); err != nil || !strings.Contains(p.Detail, "Upgrade your plan.") {
				t.Errorf("429 body %s (%v): the detail is missing", v.Body, err)
			}
		}
	}
	// The next window admits again.
	clock.Advance(time.Hour)
	if v := e.Decide(context.Background(), in); !v.Allowed {
		t.Errorf("next window: %d %s, want allowed", v.Status, v.Body)
	}
}

// Step 8: a runnable example.
func ExampleLimiter() {
	now := time.Unix(1_700_000_000, 0)
	l, _ := New(Config{Policy: &policy.Policy{Name: "trial", Limit: 2, Window: time.Hour}, Now: func() time.Time { return now }})
	for range 3 {
		d, _ := l.Allow(context.Background(), edgelimit.Request{Key: "hashed-client-key"})
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 46m40s
}
