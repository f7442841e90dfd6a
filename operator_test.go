package edgelimit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/overrides"
	"github.com/edgelimit/edgelimit/policy"
)

// operated is a counter that can also be reset and granted, as durable and
// kv limiters are.
type operated struct {
	*counter
	resets []string
	grants []string
}

func (o *operated) Reset(_ context.Context, req edgelimit.Request) error {
	key := req.Key
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.n, key)
	o.resets = append(o.resets, key)
	return nil
}

func (o *operated) Grant(_ context.Context, req edgelimit.Request, units int64, _ time.Time) error {
	key := req.Key
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[key] -= units
	o.grants = append(o.grants, key)
	return nil
}

// operatedLimits is a limitsOf whose resets and grants land in o.
type operatedLimits struct {
	*limitsOf
	o *operated
}

func (x operatedLimits) Reset(ctx context.Context, req edgelimit.Request) error {
	return x.o.Reset(ctx, req)
}

func (x operatedLimits) Grant(ctx context.Context, req edgelimit.Request, units int64, until time.Time) error {
	return x.o.Grant(ctx, req, units, until)
}

const adminPolicies = `version: 1
policies:
  - name: paid
    routes: ["GET /paid/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 3
    window: 1h
    overrides: true
    tiers:
      by: header:X-Plan
      default: free
      levels: {free: {limit: 3}, pro: {limit: 30}}
  - {name: by-ip, routes: ["GET /ip"], key: ip, strategy: durable, limit: 2, window: 1m}
  - {name: signed, routes: ["GET /s"], key: ip, strategy: signed, limit: 2, window: 1m}
`

type adminFixture struct {
	e     *edgelimit.Engine
	ls    map[string]*operated
	store *overrides.Memory
	now   time.Time
	ctx   context.Context
}

func newAdminFixture(t *testing.T) *adminFixture {
	t.Helper()
	f, err := policy.Parse("p.yaml", []byte(adminPolicies))
	if err != nil {
		t.Fatal(err)
	}
	fx := &adminFixture{ls: map[string]*operated{}, now: time.Unix(1_700_000_000, 0), ctx: context.Background()}
	fx.store = overrides.NewMemory(func() time.Time { return fx.now })
	var mu sync.Mutex
	fx.e, err = edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)), Overrides: fx.store,
		Now: func() time.Time { return fx.now }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			mu.Lock()
			defer mu.Unlock()
			if p.StrategyName() == "signed" {
				// Stores nothing: no peek, reset or grant.
				return limitertest.LimiterFunc(func(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
					return edgelimit.Decision{Allowed: true, Limit: 2, Window: time.Minute, Remaining: 1}, nil
				}), nil
			}
			o := &operated{counter: &counter{p: p, n: map[string]int64{}}}
			fx.ls[p.Name] = o
			return operatedLimits{&limitsOf{counter: o.counter}, o}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

func (fx *adminFixture) get(path, key, plan, ip string) *edgelimit.Verdict {
	h := limitertest.Headers{"X-Api-Key": key}
	if plan != "" {
		h["X-Plan"] = plan
	}
	return fx.e.Decide(fx.ctx, &edgelimit.Input{Method: "GET", Path: path, SourceIP: ip, Header: h})
}

// The operator's key is the request's key: hashed the same way, with the
// same normalisation (trimmed header values, IPv6 grouped by /64).
func TestKeyOfIsTheRequestsKey(t *testing.T) {
	fx := newAdminFixture(t)
	fx.get("/paid/x", " alice ", "", "192.0.2.1")
	fx.get("/ip", "", "", "2001:db8:1:2::7")
	if k, err := fx.e.KeyOf("paid", "alice"); err != nil || k != fx.ls["paid"].keys[0] {
		t.Errorf("KeyOf(paid, alice) = %q, %v; the request's key was %q", k, err, fx.ls["paid"].keys[0])
	}
	if k, err := fx.e.KeyOf("by-ip", "2001:db8:1:2::99"); err != nil || k != fx.ls["by-ip"].keys[0] {
		t.Errorf("KeyOf(by-ip, same /64) = %q, %v; want the request's %q", k, err, fx.ls["by-ip"].keys[0])
	}
	for _, bad := range []struct{ policy, key, want string }{
		{"by-ip", "not-an-ip", "an IP address"},
		{"paid", "   ", "empty or not valid"},
		{"paid", strings.Repeat("k", 5000), "empty or not valid"},
		{"piad", "alice", `no policy "piad" (did you mean "paid"?)`},
	} {
		if _, err := fx.e.KeyOf(bad.policy, bad.key); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("KeyOf(%q, %.10q) error %v, want %q", bad.policy, bad.key, err, bad.want)
		}
		if _, err := fx.e.KeyOf(bad.policy, bad.key); err != nil && strings.Contains(err.Error(), strings.Repeat("k", 50)) {
			t.Errorf("the error echoes the key: %v", err)
		}
	}
}

func TestUsageResetGrant(t *testing.T) {
	fx := newAdminFixture(t)
	for range 2 {
		fx.get("/paid/x", "alice", "", "192.0.2.1")
	}
	d, err := fx.e.Usage(fx.ctx, "paid", "alice", "")
	if err != nil || d.Remaining != 1 || d.Limit != 3 || d.Policy != "paid" {
		t.Fatalf("Usage = %+v, %v; want 1 of 3 left", d, err)
	}
	if d, err := fx.e.Usage(fx.ctx, "paid", "alice", "pro"); err != nil || d.Limit != 30 || d.Remaining != 28 {
		t.Errorf("Usage as pro = %+v, %v; want 28 of 30", d, err)
	}
	if _, err := fx.e.Usage(fx.ctx, "paid", "alice", "gold"); err == nil || !strings.Contains(err.Error(), `no tier "gold" (it has free, pro)`) {
		t.Errorf("Usage of an unknown tier: %v", err)
	}
	if _, err := fx.e.Usage(fx.ctx, "by-ip", "192.0.2.1", "pro"); err == nil || !strings.Contains(err.Error(), "has no tiers") {
		t.Errorf("Usage with a tier on a policy without: %v", err)
	}
	// Usage spends nothing.
	if v := fx.get("/paid/x", "alice", "", "192.0.2.1"); !v.Allowed {
		t.Fatalf("third request denied after Usage: %s", v.Body)
	}
	if v := fx.get("/paid/x", "alice", "", "192.0.2.1"); v.Allowed {
		t.Fatal("fourth request allowed")
	}
	if err := fx.e.Grant(fx.ctx, "paid", "alice", 2, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if v := fx.get("/paid/x", "alice", "", "192.0.2.1"); !v.Allowed {
			t.Fatalf("granted request %d denied", i)
		}
	}
	if err := fx.e.Reset(fx.ctx, "paid", "alice"); err != nil {
		t.Fatal(err)
	}
	if d, _ := fx.e.Usage(fx.ctx, "paid", "alice", ""); d.Remaining != 3 {
		t.Errorf("after Reset: %d left, want 3", d.Remaining)
	}
	if err := fx.e.Grant(fx.ctx, "paid", "alice", 0, time.Time{}); err == nil {
		t.Error("a grant of 0 units was accepted")
	}
	// A signed policy stores nothing: every operation says so.
	for name, err := range map[string]error{
		"usage": func() error { _, err := fx.e.Usage(fx.ctx, "signed", "192.0.2.1", ""); return err }(),
		"reset": fx.e.Reset(fx.ctx, "signed", "192.0.2.1"),
		"grant": fx.e.Grant(fx.ctx, "signed", "192.0.2.1", 1, time.Time{}),
	} {
		if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), `policy "signed" (signed) keeps no usage`) {
			t.Errorf("%s on a signed policy: %v", name, err)
		}
	}
}

// An override set through the engine applies to this instance's next
// request at once (its cache entry is dropped), expires on time, and can be
// removed.
func TestSetOverrideThroughTheEngine(t *testing.T) {
	fx := newAdminFixture(t)
	for range 3 {
		fx.get("/paid/x", "bob", "", "192.0.2.1")
	}
	if v := fx.get("/paid/x", "bob", "", "192.0.2.1"); v.Allowed {
		t.Fatal("fourth request allowed at limit 3")
	}
	if err := fx.e.SetOverride(fx.ctx, "paid", "bob", policy.Limits{Limit: 10}, fx.now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if l, ok, err := fx.e.Override(fx.ctx, "paid", "bob"); err != nil || !ok || l.Limit != 10 {
		t.Fatalf("Override = %+v, %v, %v", l, ok, err)
	}
	if v := fx.get("/paid/x", "bob", "", "192.0.2.1"); !v.Allowed || !strings.Contains(v.Decisions[0].Policy, "paid") || v.Decisions[0].Limit != 10 {
		t.Fatalf("after the override: %+v", v.Decisions)
	}
	// The override beats the tier, field by field.
	if d, _ := fx.e.Usage(fx.ctx, "paid", "bob", "pro"); d.Limit != 10 {
		t.Errorf("Usage as pro with an override = %d, want the override's 10", d.Limit)
	}
	// It expires: after its instant (and the cache's staleness), the
	// policy's limit is back.
	fx.now = fx.now.Add(time.Hour + 2*time.Minute)
	if v := fx.get("/paid/x", "bob", "", "192.0.2.1"); v.Decisions[0].Limit != 3 {
		t.Errorf("after expiry: limit %d, want 3", v.Decisions[0].Limit)
	}
	if err := fx.e.SetOverride(fx.ctx, "paid", "bob", policy.Limits{Limit: 7}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := fx.e.DeleteOverride(fx.ctx, "paid", "bob"); err != nil {
		t.Fatal(err)
	}
	if v := fx.get("/paid/x", "bob", "", "192.0.2.1"); v.Decisions[0].Limit != 3 {
		t.Errorf("after DeleteOverride: limit %d, want 3", v.Decisions[0].Limit)
	}
	for _, tc := range []struct {
		policy string
		l      policy.Limits
		want   string
	}{
		{"by-ip", policy.Limits{Limit: 1}, "does not read overrides; add `overrides: true`"},
		{"paid", policy.Limits{}, "needs a limit, a window or a burst"},
		{"paid", policy.Limits{Limit: -1}, "cannot be negative"},
		{"paid", policy.Limits{Window: time.Microsecond}, "shorter than 1ms"},
	} {
		if err := fx.e.SetOverride(fx.ctx, tc.policy, "192.0.2.1", tc.l, time.Time{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetOverride(%s, %+v) = %v, want %q", tc.policy, tc.l, err, tc.want)
		}
	}
}
