package edgelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/keyhash"
	isecret "github.com/edgelimit/edgelimit/internal/secret"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// counter is a minimal exact limiter for engine unit tests; the real
// backends run the conformance suite in package limitertest.
type counter struct {
	p        *policy.Policy
	mu       sync.Mutex
	n        map[string]int64
	keys     []string
	refunds  int
	err      error
	block    bool // wait for the context to end, like a hung store
	batchKey string
	batches  int
	peeks    int
	charges  []int64
}

func (c *counter) Allow(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
	if c.block {
		<-ctx.Done()
		return edgelimit.Decision{}, ctx.Err()
	}
	if c.err != nil {
		return edgelimit.Decision{}, c.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = append(c.keys, r.Key)
	return c.decide(r, true), nil
}

func (c *counter) decide(r edgelimit.Request, spend bool) edgelimit.Decision {
	limit := c.p.Limit
	if r.Limits.Limit > 0 {
		limit = r.Limits.Limit // the tier's or the override's, as strategies do
	}
	d := edgelimit.Decision{Limit: limit, Window: c.p.Window, Reset: c.p.Window}
	if c.n[r.Key]+r.Units() > limit {
		d.RetryAfter = c.p.Window
		d.Remaining = max(limit-c.n[r.Key], 0)
		return d
	}
	if spend {
		c.n[r.Key] += r.Units()
	}
	d.Allowed = true
	d.Remaining = limit - c.n[r.Key]
	return d
}

// Peek answers without spending, as the engine asks once another policy
// denied.
func (c *counter) Peek(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
	if c.block {
		<-ctx.Done()
		return edgelimit.Decision{}, ctx.Err()
	}
	if c.err != nil {
		return edgelimit.Decision{}, c.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.peeks++
	return c.decide(r, false), nil
}

func (c *counter) Refund(ctx context.Context, r edgelimit.Request, _ edgelimit.Decision) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refunds++
	c.n[r.Key] -= r.Units()
	return nil
}

// batcher is a counter that also decides atomically with its siblings.
type batcher struct{ *counter }

func (b batcher) BatchKey() string { return b.batchKey }

func (b batcher) AllowBatch(ctx context.Context, items []edgelimit.BatchItem) ([]edgelimit.Decision, error) {
	ds := make([]edgelimit.Decision, len(items))
	ok := true
	for i, it := range items {
		c := it.Limiter.(batcher).counter
		c.mu.Lock()
		c.batches++
		ds[i] = c.decide(it.Request, false)
		c.mu.Unlock()
		ok = ok && ds[i].Allowed
	}
	if ok {
		for i, it := range items {
			c := it.Limiter.(batcher).counter
			c.mu.Lock()
			ds[i] = c.decide(it.Request, true)
			c.mu.Unlock()
		}
	}
	return ds, nil
}

type fixture struct {
	t        *testing.T
	e        *edgelimit.Engine
	limiters map[string]*counter
	events   []edgelimit.Event
}

func newFixture(t *testing.T, yaml string, tweak func(name string, c *counter) edgelimit.Limiter) *fixture {
	t.Helper()
	f, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixture{t: t, limiters: map[string]*counter{}}
	var mu sync.Mutex
	e, err := edgelimit.New(edgelimit.Config{
		Policies:   f,
		HashSecret: []byte(strings.Repeat("k", 32)),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observe: func(ev edgelimit.Event) {
			mu.Lock()
			fx.events = append(fx.events, ev)
			mu.Unlock()
		},
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			c := &counter{p: p, n: map[string]int64{}}
			fx.limiters[p.Name] = c
			if tweak != nil {
				return tweak(p.Name, c), nil
			}
			return c, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	fx.e = e
	return fx
}

func (fx *fixture) do(method, path, ip string, headers map[string]string) *edgelimit.Verdict {
	return fx.e.Decide(context.Background(), &edgelimit.Input{Method: method, Path: path, SourceIP: ip, Header: limitertest.Headers(headers)})
}

func header(v *edgelimit.Verdict, name string) string {
	for _, f := range v.Header() {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

func problem(t *testing.T, v *edgelimit.Verdict) limitertest.Problem {
	t.Helper()
	var p limitertest.Problem
	if err := json.Unmarshal(v.Body, &p); err != nil {
		t.Fatalf("body %q is not a problem: %v", v.Body, err)
	}
	return p
}

const twoPolicies = `version: 1
policies:
  - {name: burst, routes: ["GET /paid/*"], key: header:X-Api-Key, strategy: kv, limit: 2, window: 10s}
  - {name: daily, routes: ["GET /paid/*"], key: header:X-Api-Key, strategy: durable, limit: 3, window: 1d}
  - {name: other, routes: ["POST /other"], key: ip, strategy: durable, limit: 1, window: 1m}
`

func TestEngineAllowsThenDenies(t *testing.T) {
	fx := newFixture(t, twoPolicies, nil)
	key := map[string]string{"X-Api-Key": "k1"}
	v := fx.do("GET", "/paid/a", "1.2.3.4", key)
	if !v.Allowed || v.Status != 0 {
		t.Fatalf("first request: %+v", v)
	}
	if got, want := header(v, "RateLimit-Policy"), `"burst";q=2;w=10, "daily";q=3;w=86400`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got, want := header(v, "RateLimit"), `"burst";r=1;t=10, "daily";r=2;t=86400`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	// Legacy headers describe the most restrictive policy.
	if header(v, "X-RateLimit-Limit") != "2" || header(v, "X-RateLimit-Remaining") != "1" || header(v, "X-RateLimit-Reset") != "10" {
		t.Errorf("legacy headers = %v", v.Header())
	}
	fx.do("GET", "/paid/a", "1.2.3.4", key)
	v = fx.do("GET", "/paid/b", "1.2.3.4", key)
	if v.Allowed || v.Status != 429 {
		t.Fatalf("third request: allowed=%v status=%d, want 429", v.Allowed, v.Status)
	}
	if got := header(v, "Retry-After"); got != "10" {
		t.Errorf("Retry-After = %q, want 10", got)
	}
	if got := header(v, "Content-Type"); got != "application/problem+json" {
		t.Errorf("Content-Type = %q", got)
	}
	p := problem(t, v)
	if p.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || p.Status != 429 || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "burst" || p.Title == "" || p.Detail == "" {
		t.Errorf("problem = %+v", p)
	}
	// The denial by burst spent nothing of daily: it was never asked.
	if got := fx.limiters["daily"].n; len(got) != 1 || sum(got) != 2 {
		t.Errorf("daily spent %v, want 2 units", got)
	}
	// Another client has its own quota.
	if v := fx.do("GET", "/paid/a", "1.2.3.4", map[string]string{"X-Api-Key": "k2"}); !v.Allowed {
		t.Errorf("second client denied: %s", v.Body)
	}
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

// A denial by a later (exact) policy refunds what earlier soft policies spent.
func TestEngineRefundsWhenLaterPolicyDenies(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: soft, routes: ["GET /x"], key: ip, strategy: kv, limit: 100, window: 1m}
  - {name: hard, routes: ["GET /x"], key: ip, strategy: durable, limit: 1, window: 1m}
`, nil)
	fx.do("GET", "/x", "1.2.3.4", nil)
	v := fx.do("GET", "/x", "1.2.3.4", nil)
	if v.Allowed {
		t.Fatal("second request allowed, want denied by hard")
	}
	if p := problem(t, v); len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "hard" {
		t.Errorf("violated = %v, want [hard]", p.ViolatedPolicies)
	}
	soft := fx.limiters["soft"]
	if soft.refunds != 1 || sum(soft.n) != 1 {
		t.Errorf("soft: refunds=%d spent=%d, want 1 refund and 1 unit spent", soft.refunds, sum(soft.n))
	}
}

// Batchable policies are decided in one atomic call, and a denial by one
// member spends nobody's quota.
func TestEngineBatchesAtomically(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: a, routes: ["GET /x"], key: ip, strategy: durable, limit: 5, window: 1m}
  - {name: b, routes: ["GET /x"], key: ip, strategy: durable, limit: 1, window: 1m}
`, func(name string, c *counter) edgelimit.Limiter {
		c.batchKey = "store-1"
		return batcher{c}
	})
	if v := fx.do("GET", "/x", "1.2.3.4", nil); !v.Allowed {
		t.Fatalf("first denied: %s", v.Body)
	}
	v := fx.do("GET", "/x", "1.2.3.4", nil)
	if v.Allowed || v.Status != 429 {
		t.Fatalf("second: %+v", v)
	}
	a, b := fx.limiters["a"], fx.limiters["b"]
	if sum(a.n) != 1 || sum(b.n) != 1 {
		t.Errorf("spent a=%d b=%d, want 1 and 1 (the denied batch spends nothing)", sum(a.n), sum(b.n))
	}
	if a.batches != 2 || len(a.keys) != 0 {
		t.Errorf("a: %d batches, %d single calls; want every decision batched", a.batches, len(a.keys))
	}
	if a.refunds+b.refunds != 0 {
		t.Errorf("refunds = %d, want none: nothing of a denied batch is spent", a.refunds+b.refunds)
	}
	// The member that would have fitted still shows in RateLimit.
	if got, want := header(v, "RateLimit"), `"a";r=4;t=60, "b";r=0;t=60`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
}

func TestEngineStoreFailure(t *testing.T) {
	broken := errors.New("connection refused")
	yaml := `version: 1
policies:
  - {name: open, routes: ["GET /open"], key: ip, strategy: kv, limit: 1, window: 1m}
  - {name: closed, routes: ["GET /closed"], key: ip, strategy: durable, limit: 1, window: 1m}
  - {name: hung, routes: ["GET /hung"], key: ip, strategy: durable, limit: 1, window: 1m, store_timeout: 5ms}
`
	fx := newFixture(t, yaml, func(name string, c *counter) edgelimit.Limiter {
		c.err = broken
		c.block = name == "hung"
		return c
	})
	for i := 0; i < 3; i++ {
		v := fx.do("GET", "/open", "1.2.3.4", nil)
		if !v.Allowed || !v.Decisions[0].Degraded {
			t.Fatalf("fail-open policy: allowed=%v degraded=%v, want allowed and degraded", v.Allowed, v.Decisions[0].Degraded)
		}
	}
	for _, path := range []string{"/closed", "/hung"} {
		v := fx.do("GET", path, "1.2.3.4", nil)
		if v.Allowed || v.Status != 503 {
			t.Fatalf("%s: allowed=%v status=%d, want 503", path, v.Allowed, v.Status)
		}
		if got := header(v, "Retry-After"); got != "1" {
			t.Errorf("%s: Retry-After = %q, want 1", path, got)
		}
		if p := problem(t, v); p.Type != "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity" || p.Status != 503 || strings.Contains(string(v.Body), "refused") {
			t.Errorf("%s: problem = %s (must not echo the store error)", path, v.Body)
		}
	}
	var degraded, withErr int
	for _, ev := range fx.events {
		if ev.Degraded {
			degraded++
		}
		if ev.StoreError != nil {
			withErr++
		}
	}
	if degraded != 5 || withErr != 5 {
		t.Errorf("events: %d degraded, %d with errors; want 5 and 5", degraded, withErr)
	}
	var hungErr error
	for _, ev := range fx.events {
		if ev.Policy == "hung" {
			hungErr = ev.StoreError
		}
	}
	if !errors.Is(hungErr, context.DeadlineExceeded) {
		t.Errorf("hung store error = %v, want the time budget's deadline", hungErr)
	}
}

// localCounter is a counter whose store is down, with an in-process twin.
type localCounter struct {
	*counter
	twins *int
}

func (l localCounter) Local() (edgelimit.Limiter, error) {
	*l.twins++
	return &counter{p: l.p, n: map[string]int64{}}, nil
}

// on_store_error: local keeps limiting while the store is down: the
// limiter's in-process twin decides, and its denials are 429s, not 503s.
func TestEngineStoreFailureLocal(t *testing.T) {
	yaml := `version: 1
policies:
  - {name: search, routes: ["GET /search"], key: ip, strategy: durable, limit: 2, window: 1m, on_store_error: local}
`
	twins := 0
	fx := newFixture(t, yaml, func(name string, c *counter) edgelimit.Limiter {
		c.err = errors.New("store down")
		return localCounter{c, &twins}
	})
	var statuses []int
	for i := 0; i < 3; i++ {
		v := fx.do("GET", "/search", "1.2.3.4", nil)
		statuses = append(statuses, v.Status)
		if !v.Decisions[0].Degraded {
			t.Errorf("request %d: decision not marked degraded", i)
		}
	}
	if want := []int{0, 0, 429}; !slices.Equal(statuses, want) {
		t.Errorf("statuses = %v, want %v (two allowed by the in-process twin, then 429)", statuses, want)
	}
	if twins != 1 {
		t.Errorf("twins built = %d, want 1", twins)
	}
	f, _ := policy.Parse("p.yaml", []byte(yaml))
	_, err := edgelimit.New(edgelimit.Config{Policies: f, Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) { return &counter{p: p}, nil }})
	if err == nil || !strings.Contains(err.Error(), "a Local method") {
		t.Errorf("New with a limiter without a twin = %v, want an error naming the Local method", err)
	}
}

func TestEngineShadowNeverBlocks(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: trial, routes: ["GET /x"], key: header:X-Api-Key, strategy: durable, limit: 1, window: 1m, shadow: true}
`, nil)
	for i := 0; i < 3; i++ {
		v := fx.do("GET", "/x", "1.2.3.4", map[string]string{"X-Api-Key": "k"})
		if !v.Allowed {
			t.Fatalf("request %d blocked by a shadow policy", i)
		}
		if h := header(v, "RateLimit"); h != "" {
			t.Errorf("shadow policy shown to the client: %q", h)
		}
	}
	// A shadow policy without its key does not 400 either.
	if v := fx.do("GET", "/x", "1.2.3.4", nil); !v.Allowed {
		t.Errorf("shadow policy without key: status %d", v.Status)
	}
	denied := 0
	for _, ev := range fx.events {
		if !ev.Allowed && ev.Shadow {
			denied++
		}
	}
	if denied != 2 {
		t.Errorf("shadow denials reported = %d, want 2", denied)
	}
}

func TestEngineMissingKey(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: strict, routes: ["GET /strict"], key: header:X-Api-Key, strategy: durable, limit: 1, window: 1m}
  - {name: lenient, routes: ["GET /lenient"], key: header:X-Api-Key, on_missing_key: ip, strategy: durable, limit: 1, window: 1m}
  - {name: claims, routes: ["GET /claims"], key: claim:sub, strategy: durable, limit: 1, window: 1m}
`, nil)
	v := fx.do("GET", "/strict", "1.2.3.4", nil)
	if v.Status != 400 || !strings.Contains(problem(t, v).Detail, "X-Api-Key") {
		t.Errorf("missing header: status %d body %s, want 400 naming the header", v.Status, v.Body)
	}
	v = fx.do("GET", "/strict", "1.2.3.4", map[string]string{"X-Api-Key": strings.Repeat("k", 2000)})
	if v.Status != 400 {
		t.Errorf("2000-byte key: status %d, want 400", v.Status)
	}
	v = fx.do("GET", "/strict", "1.2.3.4", map[string]string{"X-Api-Key": "\xff\xfe"})
	if v.Status != 400 {
		t.Errorf("invalid UTF-8 key: status %d, want 400", v.Status)
	}
	if v := fx.do("GET", "/lenient", "1.2.3.4", nil); !v.Allowed {
		t.Errorf("fallback to ip: %d %s", v.Status, v.Body)
	}
	if v := fx.do("GET", "/lenient", "1.2.3.4", nil); v.Allowed {
		t.Error("fallback to ip did not count by address")
	}
	v = fx.e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/claims", SourceIP: "1.2.3.4", Claims: limitertest.Headers{"sub": "user-1"}})
	if !v.Allowed {
		t.Errorf("claim key: %d %s", v.Status, v.Body)
	}
	if v := fx.do("GET", "/claims", "1.2.3.4", nil); v.Status != 400 {
		t.Errorf("missing claim: status %d, want 400", v.Status)
	}
}

func TestEngineMalformedInput(t *testing.T) {
	fx := newFixture(t, twoPolicies, nil)
	tests := []struct {
		name         string
		method, path string
		ip           string
	}{
		{"empty method", "", "/paid/x", "1.2.3.4"},
		{"lower-case method", "get", "/paid/x", "1.2.3.4"},
		{"long method", strings.Repeat("G", 100), "/paid/x", "1.2.3.4"},
		{"empty path", "GET", "", "1.2.3.4"},
		{"relative path", "GET", "paid/x", "1.2.3.4"},
		{"invalid UTF-8 path", "GET", "/paid/\xff", "1.2.3.4"},
		{"bad escape", "GET", "/paid/%zz", "1.2.3.4"},
		{"huge path", "GET", "/" + strings.Repeat("a", 70000), "1.2.3.4"},
	}
	for _, tt := range tests {
		v := fx.do(tt.method, tt.path, tt.ip, map[string]string{"X-Api-Key": "k"})
		if v.Status != 400 || v.Allowed {
			t.Errorf("%s: allowed=%v status=%d, want 400", tt.name, v.Allowed, v.Status)
		}
	}
	// A bad source address on an ip policy is the client's problem too.
	if v := fx.do("POST", "/other", "not-an-ip", nil); v.Status != 400 {
		t.Errorf("bad source ip: status %d, want 400", v.Status)
	}
	// A request that no policy covers passes untouched.
	if v := fx.do("GET", "/free", "1.2.3.4", nil); !v.Allowed || len(v.Header()) != 0 {
		t.Errorf("unguarded route: %+v", v)
	}
}

// Regression: encoded dot segments must not escape the paid route.
func TestEngineEncodedTraversalIsLimited(t *testing.T) {
	fx := newFixture(t, twoPolicies, nil)
	v := fx.do("GET", "/public/%2e%2e/paid/x", "1.2.3.4", nil)
	if v.Status != 400 || v.Route != "GET /paid/*" {
		t.Errorf("traversal: status %d route %q, want the paid route's 400 for a missing key", v.Status, v.Route)
	}
}

func TestEngineLegacyHeadersOff(t *testing.T) {
	fx := newFixture(t, "legacy_headers: false\n"+twoPolicies, nil)
	v := fx.do("GET", "/paid/a", "1.2.3.4", map[string]string{"X-Api-Key": "k"})
	if header(v, "X-RateLimit-Limit") != "" || header(v, "RateLimit") == "" {
		t.Errorf("headers = %v, want RateLimit without X-RateLimit-*", v.Header())
	}
}

func TestEngineKeys(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: direct, routes: ["GET /d"], key: ip, strategy: durable, limit: 100, window: 1m}
  - {name: proxied, routes: ["GET /p"], key: ip, trusted_proxies: 1, strategy: durable, limit: 100, window: 1m}
  - {name: fine, routes: ["GET /f"], key: ip, ipv6_prefix: 128, strategy: durable, limit: 100, window: 1m}
  - {name: everyone, routes: ["GET /g"], key: global, strategy: durable, limit: 100, window: 1m}
`, nil)
	key := func(policy, path, ip string, h map[string]string) string {
		c := fx.limiters[policy]
		before := len(c.keys)
		fx.do("GET", path, ip, h)
		if len(c.keys) != before+1 {
			t.Fatalf("%s %s from %s: no decision", policy, path, ip)
		}
		return c.keys[before]
	}
	xff := map[string]string{"X-Forwarded-For": "6.6.6.6, 9.9.9.9"}
	a := key("direct", "/d", "1.2.3.4", nil)
	if len(a) != keyhash.Length || strings.Contains(a, "1.2.3.4") {
		t.Errorf("key %q is not a hash", a)
	}
	if b := key("direct", "/d", "1.2.3.4", xff); b != a {
		t.Error("X-Forwarded-For changed the key of a policy that trusts no proxy")
	}
	if b := key("direct", "/d", "::ffff:1.2.3.4", nil); b != a {
		t.Error("IPv4-mapped IPv6 address got a different key")
	}
	if b := key("direct", "/d", "1.2.3.5", nil); b == a {
		t.Error("two IPv4 clients share a key")
	}
	v6a := key("direct", "/d", "2001:db8:1:2::1", nil)
	if v6b := key("direct", "/d", "2001:db8:1:2:ffff::9", nil); v6b != v6a {
		t.Error("two addresses of one /64 got different keys")
	}
	if v6c := key("direct", "/d", "2001:db8:1:3::1", nil); v6c == v6a {
		t.Error("two /64s share a key")
	}
	if f1, f2 := key("fine", "/f", "2001:db8::1", nil), key("fine", "/f", "2001:db8::2", nil); f1 == f2 {
		t.Error("ipv6_prefix: 128 still grouped addresses")
	}
	p1 := key("proxied", "/p", "10.0.0.1", xff)
	if p2 := key("proxied", "/p", "10.0.0.2", map[string]string{"X-Forwarded-For": "1.1.1.1, 9.9.9.9"}); p2 != p1 {
		t.Error("trusted_proxies: 1 did not key on the right-most X-Forwarded-For entry")
	}
	if p3 := key("proxied", "/p", "9.9.9.9", nil); p3 != p1 {
		t.Error("without X-Forwarded-For the source address is the client")
	}
	// API Gateway appends the peer it saw (the source IP, here CloudFront's
	// edge) to X-Forwarded-For; that entry is not one of the proxies.
	if p4 := key("proxied", "/p", "10.9.9.9", map[string]string{"X-Forwarded-For": "9.9.9.9, 10.9.9.9"}); p4 != p1 {
		t.Error("trusted_proxies: 1 counted the entry point's own X-Forwarded-For entry as a proxy")
	}
	if p5 := key("proxied", "/p", "9.9.9.9", map[string]string{"X-Forwarded-For": "9.9.9.9"}); p5 != p1 {
		t.Error("a list holding only the entry point's entry must key on the source address")
	}
	if key("direct", "/d", "9.9.9.9", nil) == p1 {
		t.Error("two policies share a client's hash (keys must be per policy)")
	}
	if g1, g2 := key("everyone", "/g", "1.1.1.1", nil), key("everyone", "/g", "2.2.2.2", nil); g1 != g2 {
		t.Error("global key differs by client")
	}
}

// The generic channel: a limiter's header field, detail and problem
// extension reach a 429 without the engine knowing what they mean.
func TestEngineLimiterFieldsOnDenial(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: tts, routes: ["POST /tts"], key: ip, strategy: signed, limit: 10, window: 1m, proof_of_work: {bits: 8}}
`, func(name string, c *counter) edgelimit.Limiter {
		return limitertest.LimiterFunc(func(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
			return edgelimit.Decision{Limit: 10, Window: time.Minute, Response: &edgelimit.Response{
				Field:     edgelimit.Field{Name: "Edgelimit-Challenge", Value: "v1.abc"},
				Detail:    "Solve it.",
				Extension: `{"challenge": {"challenge":"v1.abc","bits":8}, "type": "not-replaced"}`}}, nil
		})
	})
	v := fx.do("POST", "/tts", "1.2.3.4", nil)
	if v.Status != 429 || header(v, "Edgelimit-Challenge") != "v1.abc" || header(v, "Retry-After") != "1" {
		t.Fatalf("status %d, headers %v", v.Status, v.Header())
	}
	if got, want := header(v, "RateLimit"), `"tts";r=0`; got != want {
		t.Errorf("RateLimit = %q, want %q (no t without an effective window)", got, want)
	}
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"Quota exceeded for policy \"tts\". Retry in 1 second. Solve it.","violated-policies":["tts"],"retry-after":1,"challenge":{"challenge":"v1.abc","bits":8}}`
	if string(v.Body) != want {
		t.Errorf("body\n%s\nwant\n%s", v.Body, want)
	}
}

func TestEngineTokensOnlyWhenAllowed(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: win, routes: ["POST /t"], key: ip, strategy: signed, limit: 10, window: 1m}
  - {name: hard, routes: ["POST /t"], key: ip, strategy: durable, limit: 1, window: 1m}
`, func(name string, c *counter) edgelimit.Limiter {
		if name == "hard" {
			return c
		}
		return limitertest.LimiterFunc(func(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
			return edgelimit.Decision{Allowed: true, Limit: 10, Window: time.Minute, Remaining: 9, Response: &edgelimit.Response{Field: edgelimit.Field{Name: "Edgelimit-Token", Value: "tok"}}}, nil
		})
	})
	if v := fx.do("POST", "/t", "1.2.3.4", nil); header(v, "Edgelimit-Token") != "tok" {
		t.Errorf("allowed: Edgelimit-Token = %q, want tok", header(v, "Edgelimit-Token"))
	}
	if v := fx.do("POST", "/t", "1.2.3.4", nil); v.Allowed || header(v, "Edgelimit-Token") != "" {
		t.Errorf("denied request handed out a token: %v", v.Header())
	}
}

// quoted is a limiter that says what its decisions announce.
type quoted struct {
	limitertest.LimiterFunc
	q int64
	w time.Duration
}

func (l quoted) Quota() (int64, time.Duration) { return l.q, l.w }

// RateLimit-Policy shows what each decision says its quota is (a bucket's
// limiter announces its burst over the time it takes to fill); a decision
// the store could not make announces what the limiter's Quota says.
func TestEngineAdvertisesDecisionQuota(t *testing.T) {
	failing := false
	fx := newFixture(t, `version: 1
policies:
  - {name: search, routes: ["GET /s"], key: ip, strategy: durable, algorithm: gcra, limit: 10, burst: 20, window: 1s, on_store_error: allow}
  - {name: form, routes: ["GET /f"], key: ip, strategy: kv, limit: 6, burst: 3, window: 1m}
`, func(name string, c *counter) edgelimit.Limiter {
		f := limitertest.LimiterFunc(func(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
			if failing {
				return edgelimit.Decision{}, errors.New("store down")
			}
			if name == "search" {
				return edgelimit.Decision{Allowed: true, Limit: 20, Window: 2 * time.Second, Remaining: 19, Reset: 100 * time.Millisecond}, nil
			}
			return edgelimit.Decision{Allowed: true, Limit: 3, Window: 30 * time.Second, Remaining: 2, Reset: 20 * time.Second}, nil
		})
		if name == "search" {
			return quoted{f, 20, 2 * time.Second}
		}
		return quoted{f, 3, 30 * time.Second}
	})
	for _, failing = range []bool{false, true} {
		for path, want := range map[string][2]string{"/s": {`"search";q=20;w=2`, "20"}, "/f": {`"form";q=3;w=30`, "3"}} {
			v := fx.do("GET", path, "1.2.3.4", nil)
			if got := header(v, "RateLimit-Policy"); got != want[0] {
				t.Errorf("%s (store failing %v): RateLimit-Policy = %q, want %q", path, failing, got, want[0])
			}
			if got := header(v, "X-RateLimit-Limit"); got != want[1] {
				t.Errorf("%s (store failing %v): X-RateLimit-Limit = %q, want %q", path, failing, got, want[1])
			}
		}
	}
}

func TestNewErrors(t *testing.T) {
	f, _ := policy.Parse("p.yaml", []byte(twoPolicies))
	build := func(p *policy.Policy) (edgelimit.Limiter, error) { return &counter{p: p}, nil }
	if _, err := edgelimit.New(edgelimit.Config{Limiters: build}); err == nil {
		t.Error("New without policies succeeded")
	}
	if _, err := edgelimit.New(edgelimit.Config{Policies: f}); err == nil {
		t.Error("New without a factory succeeded")
	}
	if _, err := edgelimit.New(edgelimit.Config{Policies: f, Limiters: build, HashSecret: []byte("short")}); !errors.Is(err, isecret.ErrShort) {
		t.Errorf("short secret: %v, want ErrShortSecret", err)
	}
	boom := errors.New("no such store")
	_, err := edgelimit.New(edgelimit.Config{Policies: f, Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) { return nil, boom }})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `policy "burst"`) {
		t.Errorf("factory error = %v, want it wrapped with the policy name", err)
	}
}

func FuzzDecide(f *testing.F) {
	f.Add("GET", "/paid/x", "1.2.3.4", "k", "")
	f.Add("POST", "/other", "2001:db8::1", "", "1.1.1.1, 2.2.2.2")
	f.Add("", "", "", "\xff", "")
	f.Add("GET", "/public/%2e%2e/paid/x", "::ffff:10.0.0.1", "k", ",,,")
	f.Fuzz(func(t *testing.T, method, path, ip, apiKey, xff string) {
		fx := newFixture(t, twoPolicies, nil)
		v := fx.do(method, path, ip, map[string]string{"X-Api-Key": apiKey, "X-Forwarded-For": xff, "Edgelimit-Token": apiKey})
		switch {
		case v.Allowed && v.Status == 0:
		case !v.Allowed && (v.Status == 400 || v.Status == 429):
			var p limitertest.Problem
			if err := json.Unmarshal(v.Body, &p); err != nil || p.Status != v.Status {
				t.Fatalf("status %d with body %q", v.Status, v.Body)
			}
		default:
			t.Fatalf("Decide(%q %q from %q) = allowed %v status %d", method, path, ip, v.Allowed, v.Status)
		}
		for _, h := range v.Header() {
			if strings.ContainsAny(h.Value, "\r\n") {
				t.Fatalf("header %s carries a line break: %q", h.Name, h.Value)
			}
		}
	})
}

// Regression (issue 10, item 1): no spelling of a path escapes its route's
// policies, and the route the gateway matched guards the request too.
func TestEngineEverySpellingIsLimited(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: contact, routes: ["POST /contact"], key: ip, strategy: kv, limit: 5, window: 1m}
  - {name: paid, routes: ["GET /paid/*"], key: ip, strategy: durable, limit: 100, window: 1m}
`, nil)
	spellings := []string{"/contact", "/contact/", "//contact", "/contact//", "/./contact", "/x/../contact", "/%63ontact", "/contact%2F", "/contact/."}
	admitted := 0
	for _, p := range spellings {
		if v := fx.do("POST", p, "1.2.3.4", nil); v.Allowed {
			admitted++
		} else if v.Status != 429 {
			t.Errorf("POST %s: status %d, want 429 once the quota is spent", p, v.Status)
		}
	}
	if admitted != 5 {
		t.Errorf("admitted %d across %d spellings of /contact, want 5", admitted, len(spellings))
	}
	for _, p := range []string{"/paid", "/paid/", "/paid/x", "//paid//x/"} {
		if v := fx.do("GET", p, "1.2.3.4", nil); v.Route != "GET /paid/*" {
			t.Errorf("GET %s: route %q, want GET /paid/*", p, v.Route)
		}
	}
	// The gateway says it matched "POST /contact" for a path the file does
	// not cover: the route's policies still apply.
	v := fx.e.Decide(context.Background(), &edgelimit.Input{Method: "POST", Path: "/elsewhere", Route: "POST /contact", SourceIP: "5.6.7.8"})
	if v.Route != "POST /contact" || header(v, "RateLimit") == "" {
		t.Errorf("gateway route: route %q, headers %v; want the contact policy", v.Route, v.Header())
	}
	if v := fx.e.Decide(context.Background(), &edgelimit.Input{Method: "POST", Path: "/elsewhere", Route: "$default", SourceIP: "5.6.7.8"}); v.Route != "" {
		t.Errorf("$default route: %q, want unguarded", v.Route)
	}
	v = fx.e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/p/x", Route: "GET /paid/{resource}", SourceIP: "5.6.7.8"})
	if v.Route != "GET /paid/*" {
		t.Errorf("gateway template /paid/{resource}: route %q, want GET /paid/*", v.Route)
	}
}

// Regression (issue 10, item 5): a 429 is answered only once every policy
// of the route is known. A soft policy denies first; the exact ones behind
// it are peeked, not spent, so the 429 names all that deny, Retry-After is
// the longest wait, and RateLimit lists every policy.
func TestEngineNamesEveryViolatedPolicy(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: soft, routes: ["GET /x"], key: ip, strategy: kv, limit: 2, window: 4s}
  - {name: hourly, routes: ["GET /x"], key: ip, strategy: durable, limit: 2, window: 1h}
  - {name: daily, routes: ["GET /x"], key: ip, strategy: durable, limit: 100, window: 24h}
`, func(name string, c *counter) edgelimit.Limiter {
		if name == "soft" {
			return c
		}
		c.batchKey = "store-1"
		return batcher{c}
	})
	for range 2 {
		if v := fx.do("GET", "/x", "1.2.3.4", nil); !v.Allowed {
			t.Fatalf("denied early: %s", v.Body)
		}
	}
	v := fx.do("GET", "/x", "1.2.3.4", nil)
	if v.Status != 429 {
		t.Fatalf("third: status %d, want 429", v.Status)
	}
	if p := problem(t, v); !slices.Equal(p.ViolatedPolicies, []string{"soft", "hourly"}) {
		t.Errorf("violated-policies = %v, want [soft hourly]", p.ViolatedPolicies)
	}
	if got := header(v, "Retry-After"); got != "3600" {
		t.Errorf("Retry-After = %q, want 3600 (the longest wait: hourly)", got)
	}
	if got, want := header(v, "RateLimit"), `"soft";r=0;t=4, "hourly";r=0;t=3600, "daily";r=98;t=86400`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	hourly, daily := fx.limiters["hourly"], fx.limiters["daily"]
	if sum(hourly.n) != 2 || sum(daily.n) != 2 || hourly.refunds+daily.refunds != 0 {
		t.Errorf("spent hourly=%d daily=%d, refunds %d; want 2, 2, none (the denied request spends nothing)", sum(hourly.n), sum(daily.n), hourly.refunds+daily.refunds)
	}
	if hourly.peeks != 1 || daily.peeks != 1 {
		t.Errorf("peeks hourly=%d daily=%d, want 1 each", hourly.peeks, daily.peeks)
	}
	var peeked int
	for _, ev := range fx.events {
		if ev.Peeked {
			peeked++
		}
	}
	if peeked != 2 {
		t.Errorf("events marked peeked = %d, want 2", peeked)
	}
}

// receipts records the decision each refund was handed.
type receipts struct {
	*counter
	got []edgelimit.Decision
}

func (r *receipts) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	d, err := r.counter.Allow(ctx, req)
	d.Receipt = edgelimit.Receipt{At: req.At.UnixNano(), Slot: 7}
	return d, err
}

func (r *receipts) Refund(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	r.got = append(r.got, d)
	return r.counter.Refund(ctx, req, d)
}

// Regression (issue 10, item 4): a refund is handed the decision it
// undoes, and the 429's RateLimit shows the state after the refund.
func TestEngineRefundGetsItsDecision(t *testing.T) {
	var soft *receipts
	fx := newFixture(t, `version: 1
policies:
  - {name: soft, routes: ["GET /x"], key: ip, strategy: kv, limit: 10, window: 1m}
  - {name: hard, routes: ["GET /x"], key: ip, strategy: durable, limit: 1, window: 1m}
`, func(name string, c *counter) edgelimit.Limiter {
		if name == "soft" {
			soft = &receipts{counter: c}
			return soft
		}
		return c
	})
	fx.do("GET", "/x", "1.2.3.4", nil)
	v := fx.do("GET", "/x", "1.2.3.4", nil)
	if v.Status != 429 || len(soft.got) != 1 {
		t.Fatalf("status %d, %d refunds; want 429 and one refund", v.Status, len(soft.got))
	}
	if d := soft.got[0]; !d.Allowed || d.Receipt.Slot != 7 || d.Receipt.At == 0 || d.Remaining != 8 {
		t.Errorf("refund got %+v, want the allowed decision with its receipt", d)
	}
	if got, want := header(v, "RateLimit"), `"soft";r=9;t=60, "hard";r=0;t=60`; got != want {
		t.Errorf("RateLimit = %q, want %q (soft shown after its refund)", got, want)
	}
}

// Regression (issue 10, item 8): shadow policies are never shown, not even
// to the handler through Verdict.Decisions.
func TestEngineShadowNotInDecisions(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: real, routes: ["GET /x"], key: ip, strategy: durable, limit: 5, window: 1m}
  - {name: trial, routes: ["GET /x"], key: ip, strategy: durable, limit: 1, window: 1m, shadow: true}
`, nil)
	for range 3 {
		v := fx.do("GET", "/x", "1.2.3.4", nil)
		if !v.Allowed || len(v.Decisions) != 1 || v.Decisions[0].Policy != "real" {
			t.Fatalf("allowed=%v decisions=%+v, want only the real policy", v.Allowed, v.Decisions)
		}
		for _, f := range v.Header() {
			if strings.Contains(f.Value, "trial") {
				t.Errorf("header %s shows the shadow policy: %q", f.Name, f.Value)
			}
		}
	}
}

// deadlines records the deadline each call's context had.
type deadlines struct {
	*counter
	mu   *sync.Mutex
	seen map[string]time.Time
}

func (d deadlines) Allow(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
	dl, _ := ctx.Deadline()
	d.mu.Lock()
	d.seen[d.p.Name] = dl
	d.mu.Unlock()
	return d.counter.Allow(ctx, r)
}

// Regression (issue 10, item 9): a request on a route with several
// policies waits at most one budget in all: every call's deadline counts
// from the request's start, not from the end of the previous call.
func TestEngineOneBudgetPerRequest(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]time.Time{}
	fx := newFixture(t, `version: 1
policies:
  - {name: soft, routes: ["GET /x"], key: ip, strategy: kv, limit: 5, window: 1m, store_timeout: 20ms}
  - {name: hard, routes: ["GET /x"], key: ip, strategy: durable, limit: 5, window: 1m, store_timeout: 60ms}
`, func(name string, c *counter) edgelimit.Limiter {
		c.block = true // both stores hang
		return deadlines{c, &mu, seen}
	})
	v := fx.do("GET", "/x", "1.2.3.4", nil)
	if v.Status != 503 {
		t.Fatalf("status %d, want 503 (hard fails closed)", v.Status)
	}
	soft, hard := seen["soft"], seen["hard"]
	if soft.IsZero() || hard.IsZero() {
		t.Fatalf("deadlines %v", seen)
	}
	if gap := hard.Sub(soft); gap != 40*time.Millisecond {
		t.Errorf("hard's deadline is %v after soft's, want exactly 40ms (both from the request's start)", gap)
	}
}

// A batch member that would have admitted, in a batch another member
// denied, spent nothing: it is reported as such, not as an admission.
func TestEngineBatchMemberThatFitReportsNothingSpent(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: a, routes: ["GET /x"], key: ip, strategy: durable, limit: 5, window: 1m}
  - {name: b, routes: ["GET /x"], key: ip, strategy: durable, limit: 1, window: 1m}
`, func(name string, c *counter) edgelimit.Limiter {
		c.batchKey = "store-1"
		return batcher{c}
	})
	fx.do("GET", "/x", "1.2.3.4", nil)
	fx.events = nil
	if v := fx.do("GET", "/x", "1.2.3.4", nil); v.Status != 429 {
		t.Fatalf("status %d, want 429", v.Status)
	}
	for _, ev := range fx.events {
		if ev.Policy == "a" && (!ev.Allowed || !ev.Peeked || ev.Refunded) {
			t.Errorf("event for a = %+v, want Allowed and Peeked (it would fit; nothing was spent)", ev)
		}
	}
}

// Charge spends whatever it is asked, past zero, as a Charger must.
func (c *counter) Charge(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
	if c.err != nil {
		return edgelimit.Decision{}, c.err
	}
	if err := ctx.Err(); err != nil {
		return edgelimit.Decision{}, err // as a store call would fail
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.charges = append(c.charges, r.Units())
	c.n[r.Key] += r.Units()
	return c.decide(r, false), nil
}

// Settle records the cost a reservation (r.Units()) was settled at, and
// counts the difference.
func (c *counter) Settle(ctx context.Context, r edgelimit.Request, _ edgelimit.Decision, cost int64) (edgelimit.Decision, error) {
	if c.err != nil {
		return edgelimit.Decision{}, c.err
	}
	if err := ctx.Err(); err != nil {
		return edgelimit.Decision{}, err // as a store call would fail
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.charges = append(c.charges, cost)
	c.n[r.Key] += cost - r.Units()
	return c.decide(edgelimit.Request{Key: r.Key}, false), nil
}

// limitsOf records the Limits each request carried.
type limitsOf struct {
	*counter
	mu  sync.Mutex
	got []policy.Limits
}

func (l *limitsOf) Allow(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
	l.mu.Lock()
	l.got = append(l.got, r.Limits)
	l.mu.Unlock()
	d, err := l.counter.Allow(ctx, r)
	if r.Limits.Limit > 0 {
		d.Limit = r.Limits.Limit // as a strategy reports the tier's quota
	}
	return d, err
}

func TestEngineTiers(t *testing.T) {
	var rec *limitsOf
	fx := newFixture(t, `version: 1
policies:
  - name: api
    routes: ["GET /api/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 100
    window: 1d
    tiers:
      by: claim:plan
      default: free
      on_unknown: reject
      levels:
        free: {limit: 10}
        pro: {limit: 10000, window: 1h}
`, func(name string, c *counter) edgelimit.Limiter { rec = &limitsOf{counter: c}; return rec })
	do := func(plan string) *edgelimit.Verdict {
		in := &edgelimit.Input{Method: "GET", Path: "/api/x", SourceIP: "1.2.3.4", Header: limitertest.Headers{"X-Api-Key": "k"}}
		if plan != "" {
			in.Claims = limitertest.Headers{"plan": plan}
		}
		return fx.e.Decide(context.Background(), in)
	}
	if v := do("pro"); !v.Allowed || !strings.HasPrefix(header(v, "RateLimit-Policy"), `"api";q=10000;`) {
		t.Errorf("pro: %d %v, want allowed with the tier's quota in RateLimit-Policy", v.Status, v.Header())
	}
	do("")
	if v := do("gold"); v.Status != 400 || !strings.Contains(string(v.Body), "free, pro") || strings.Contains(string(v.Body), "gold") {
		t.Errorf("unknown tier: %d %s, want 400 naming the tiers, not echoing the value", v.Status, v.Body)
	}
	want := []policy.Limits{{Limit: 10000, Window: time.Hour}, {Limit: 10}}
	if !slices.Equal(rec.got, want) {
		t.Errorf("limits the limiter saw = %v, want %v", rec.got, want)
	}
}

// TestEngineEmptyTierIsThePolicysQuota pins that a tier of {} names the
// policy's own quota (so the default tier follows an edit of the policy's
// limit), where it used to be refused as a tier that changes nothing.
func TestEngineEmptyTierIsThePolicysQuota(t *testing.T) {
	var rec *limitsOf
	fx := newFixture(t, `version: 1
policies:
  - name: api
    routes: ["GET /api/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 100
    window: 1d
    tiers: {by: claim:plan, default: free, levels: {free: {}, pro: {limit: 10000}}}
`, func(name string, c *counter) edgelimit.Limiter { rec = &limitsOf{counter: c}; return rec })
	in := &edgelimit.Input{Method: "GET", Path: "/api/x", SourceIP: "1.2.3.4", Header: limitertest.Headers{"X-Api-Key": "k"}}
	if v := fx.e.Decide(context.Background(), in); !v.Allowed || !strings.HasPrefix(header(v, "RateLimit-Policy"), `"api";q=100;w=86400`) {
		t.Errorf("free ({}): %d %v, want allowed under the policy's own quota", v.Status, v.Header())
	}
	if want := []policy.Limits{{}}; !slices.Equal(rec.got, want) {
		t.Errorf("limits the limiter saw = %v, want %v (the policy's)", rec.got, want)
	}
}

// overrides is an OverrideStore that counts its reads.
type countedOverrides struct {
	mu    sync.Mutex
	m     map[string]policy.Limits
	reads int
}

func (o *countedOverrides) Override(_ context.Context, policy, key string) (policy.Limits, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reads++
	l, ok := o.m[policy+"/"+key]
	return l, ok, nil
}

func (o *countedOverrides) SetOverride(_ context.Context, policy, key string, l policy.Limits, _ time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[policy+"/"+key] = l
	return nil
}

func (o *countedOverrides) DeleteOverride(_ context.Context, policy, key string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, policy+"/"+key)
	return nil
}

// An override is read at most once per key per staleness interval, and a
// policy without overrides never asks.
func TestEngineOverrides(t *testing.T) {
	f, err := policy.Parse("p.yaml", []byte(`version: 1
policies:
  - {name: api, routes: ["GET /api"], key: header:X-Api-Key, strategy: durable, limit: 5, window: 1h, overrides: true, override_staleness: 30s}
  - {name: other, routes: ["GET /other"], key: header:X-Api-Key, strategy: durable, limit: 5, window: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	store := &countedOverrides{m: map[string]policy.Limits{}}
	var rec *limitsOf
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)), Overrides: store,
		Now: func() time.Time { return now }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			l := &limitsOf{counter: &counter{p: p, n: map[string]int64{}}}
			if p.Name == "api" {
				rec = l
			}
			return l, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	do := func(path, key string) {
		e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: path, SourceIP: "1.2.3.4", Header: limitertest.Headers{"X-Api-Key": key}})
	}
	do("/api", "alice")
	do("/api", "alice")
	if store.reads != 1 {
		t.Errorf("reads after two requests = %d, want 1", store.reads)
	}
	// The operator raises alice's limit; instances see it within 30s.
	store.mu.Lock()
	store.m["api/"+edgelimitHash(t, "api", "h:alice")] = policy.Limits{Limit: 50}
	store.mu.Unlock()
	do("/api", "alice")
	now = now.Add(30 * time.Second)
	do("/api", "alice")
	if store.reads != 2 {
		t.Errorf("reads = %d, want 2 (one more once the cache is 30s old)", store.reads)
	}
	if got := rec.got[len(rec.got)-1]; got.Limit != 50 {
		t.Errorf("limits after the staleness = %+v, want the override's 50", got)
	}
	if got := rec.got[2]; got.Limit != 0 {
		t.Errorf("limits within the staleness = %+v, want none (the cached answer)", got)
	}
	before := store.reads
	for range 3 {
		do("/other", "alice")
	}
	if store.reads != before {
		t.Errorf("a policy without overrides read the store %d times", store.reads-before)
	}
}

// edgelimitHash is the engine's keyed hash of a raw, kind-prefixed key.
func edgelimitHash(t *testing.T, policy, raw string) string {
	t.Helper()
	h, err := keyhash.New([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	return h.Hash(policy, []byte(raw))
}

// finisher records how requests ended.
type finisher struct {
	*counter
	ends []end
}

// end is how a request ended, as Finish heard it.
type end struct {
	Status int
	Cost   int64
}

func (f *finisher) Finish(_ context.Context, _ edgelimit.Request, _ edgelimit.Decision, status int, cost int64) error {
	f.ends = append(f.ends, end{status, cost})
	return nil
}

// Policies that charge after the response: by the handler's reported cost,
// or only for some statuses; and refunds for others.
func TestEngineChargesAfterTheResponse(t *testing.T) {
	var fin *finisher
	fx := newFixture(t, `version: 1
policies:
  - {name: tokens, routes: ["POST /tts"], key: ip, strategy: durable, limit: 100, window: 1h, charge: response}
  - {name: logins, routes: ["POST /login"], key: ip, strategy: durable, limit: 3, window: 1h, charge_status: [401, 403]}
  - {name: calls, routes: ["POST /call"], key: ip, strategy: durable, limit: 3, window: 1h, refund_status: [5xx]}
  - {name: slots, routes: ["POST /call"], key: ip, strategy: durable, limit: 3, window: 1h}
`, func(name string, c *counter) edgelimit.Limiter {
		if name == "slots" {
			fin = &finisher{counter: c}
			return fin
		}
		return c
	})
	ctx := context.Background()
	v := fx.do("POST", "/tts", "1.2.3.4", nil)
	if !v.Allowed || !v.Finishes() {
		t.Fatalf("tts: allowed %v finishes %v", v.Allowed, v.Finishes())
	}
	v.ReportCost(40)
	v.ReportCost(2)
	v.Finish(ctx, 200)
	v.Finish(ctx, 200) // once only
	if got, n := fx.limiters["tokens"].charges, sum(fx.limiters["tokens"].n); !slices.Equal(got, []int64{42}) || n != 42 {
		t.Errorf("tokens settled at %v, %d spent; want [42] (the handler's report, once)", got, n)
	}
	for i, status := range []int{200, 401, 403, 401, 200} {
		v := fx.do("POST", "/login", "1.2.3.4", nil)
		if want := i < 4; v.Allowed != want {
			t.Errorf("login %d: allowed %v, want %v", i, v.Allowed, want)
		}
		v.Finish(ctx, status)
	}
	// Each reserved one unit: kept for the 401s and the 403, given back
	// (settled at 0) for the 200.
	if got, n := fx.limiters["logins"].charges, sum(fx.limiters["logins"].n); !slices.Equal(got, []int64{0}) || n != 3 {
		t.Errorf("logins settled at %v, %d spent; want [0] (the 200) and one unit for each 401 and 403", got, n)
	}
	for _, status := range []int{500, 200, 503} {
		fx.do("POST", "/call", "1.2.3.4", nil).Finish(ctx, status)
	}
	if calls := fx.limiters["calls"]; calls.refunds != 2 || sum(calls.n) != 1 {
		t.Errorf("calls: %d refunds, %d spent; want 2 (the 5xx) and 1", calls.refunds, sum(calls.n))
	}
	if len(fin.ends) != 3 || fin.ends[0].Status != 500 || fin.ends[1].Status != 200 {
		t.Errorf("the finisher heard %v, want every call's end", fin.ends)
	}
}

// A challenge (a denial work lifts) beside a denial only time lifts is left
// out of the 429: the client would solve it for nothing. Alone, it is sent.
func TestChallengeDroppedBesideAHardDenial(t *testing.T) {
	challenge := edgelimit.Decision{Limit: 10, Window: time.Minute, Remaining: 5, Reason: "soft-threshold",
		Response: &edgelimit.Response{Field: edgelimit.Field{Name: "Edgelimit-Challenge", Value: "ch"}, Detail: "Solve the challenge.", Extension: `{"challenge":{"challenge":"ch"}}`}}
	hardDeny := true
	fx := newFixture(t, `version: 1
policies:
  - {name: gate, routes: ["GET /x"], key: ip, strategy: kv, limit: 10, window: 1m}
  - {name: daily, routes: ["GET /x"], key: ip, strategy: kv, limit: 2, window: 1d}
`, func(name string, c *counter) edgelimit.Limiter {
		return peekable(func(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
			if name == "gate" {
				return challenge, nil
			}
			if hardDeny {
				return edgelimit.Decision{Limit: 2, Window: 24 * time.Hour, Reset: time.Hour, RetryAfter: time.Hour}, nil
			}
			return edgelimit.Decision{Allowed: true, Limit: 2, Window: 24 * time.Hour, Remaining: 1, Reset: time.Hour}, nil
		})
	})
	v := fx.do("GET", "/x", "192.0.2.1", nil)
	if v.Status != 429 || header(v, "Edgelimit-Challenge") != "" || strings.Contains(string(v.Body), "challenge") || strings.Contains(string(v.Body), "Solve") {
		t.Errorf("beside a hard denial: %d %v %s", v.Status, v.Header(), v.Body)
	}
	if p := problem(t, v); len(p.ViolatedPolicies) != 2 || header(v, "Retry-After") != "3600" {
		t.Errorf("violated %v, Retry-After %q; want both named and the hour", p.ViolatedPolicies, header(v, "Retry-After"))
	}
	var reasons []string
	for _, ev := range fx.events {
		reasons = append(reasons, ev.Policy+":"+ev.Reason)
	}
	if !slices.Contains(reasons, "gate:soft-threshold") {
		t.Errorf("events' reasons %v, want the limiter's soft-threshold", reasons)
	}
	hardDeny = false
	v = fx.do("GET", "/x", "192.0.2.1", nil)
	if v.Status != 429 || header(v, "Edgelimit-Challenge") != "ch" || !strings.Contains(string(v.Body), `"challenge":{"challenge":"ch"}`) {
		t.Errorf("alone: %d %v %s", v.Status, v.Header(), v.Body)
	}
}

// peekable is a LimiterFunc that answers peeks the same way.
type peekable func(context.Context, edgelimit.Request) (edgelimit.Decision, error)

func (f peekable) Allow(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
	return f(ctx, r)
}
func (f peekable) Peek(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
	return f(ctx, r)
}

// A client that hung up before the charge after the response does not
// escape it: Finish ignores its context's cancellation.
func TestFinishChargesAfterTheClientLeft(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: tokens, routes: ["POST /tts"], key: ip, strategy: durable, limit: 100, window: 1h, charge: response}
`, nil)
	ctx, cancel := context.WithCancel(context.Background())
	v := fx.e.Decide(ctx, &edgelimit.Input{Method: "POST", Path: "/tts", SourceIP: "192.0.2.1"})
	if !v.Allowed {
		t.Fatal("denied")
	}
	v.ReportCost(7)
	cancel() // the client went away while the handler ran
	v.Finish(ctx, 200)
	if got := fx.limiters["tokens"].charges; !slices.Equal(got, []int64{7}) {
		t.Errorf("charges %v, want [7] despite the canceled context", got)
	}
}

// A request of a policy that charges after the response reserves what the
// application set for it (WithReservation), else the policy's reserve,
// else its cost; several such policies each settle their own report
// (ReportCostFor), the rest ReportCost's; the headers show what was left
// before the reservation.
func TestReservationsAndReportsPerPolicy(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: input, routes: ["POST /gen"], key: ip, strategy: durable, limit: 1000, window: 1h, charge: response}
  - {name: output, routes: ["POST /gen"], key: ip, strategy: durable, limit: 1000, window: 1h, charge: response, reserve: 50}
  - {name: total, routes: ["POST /gen"], key: ip, strategy: durable, limit: 1000, window: 1h, charge: response, cost: 7}
`, nil)
	ctx := edgelimit.WithReservation(context.Background(), "input", 120)
	ctx = edgelimit.WithReservation(ctx, "nothing", 0) // sets nothing
	var reserved []int64
	for _, name := range []string{"input", "output", "total"} {
		reserved = append(reserved, sum(fx.limiters[name].n))
	}
	v := fx.e.Decide(ctx, &edgelimit.Input{Method: "POST", Path: "/gen", SourceIP: "192.0.2.1"})
	if !v.Allowed {
		t.Fatal("denied")
	}
	for i, name := range []string{"input", "output", "total"} {
		reserved[i] = sum(fx.limiters[name].n) - reserved[i]
	}
	if !slices.Equal(reserved, []int64{120, 50, 7}) {
		t.Errorf("reserved %v, want [120 50 7]: the application's, the policy's reserve, its cost", reserved)
	}
	if rl := header(v, "RateLimit"); !strings.Contains(rl, `"input";r=1000;`) || !strings.Contains(rl, `"output";r=1000;`) {
		t.Errorf("RateLimit %q, want what was left before the reservations", rl)
	}
	if !v.ReportCostFor("input", 100) || !v.ReportCostFor("output", 80) || v.ReportCostFor("inptu", 1) {
		t.Error("ReportCostFor: want true for the route's policies, false for a misspelt one")
	}
	v.ReportCost(30)
	v.Finish(context.Background(), 200)
	for name, want := range map[string]int64{"input": 100, "output": 80, "total": 30} {
		if got := sum(fx.limiters[name].n); got != want {
			t.Errorf("%s: %d spent after settling, want %d", name, got, want)
		}
	}
	// No report: the reservation stands.
	v = fx.e.Decide(context.Background(), &edgelimit.Input{Method: "POST", Path: "/gen", SourceIP: "192.0.2.2"})
	v.Finish(context.Background(), 200)
	if got := fx.limiters["output"].charges; len(got) != 1 {
		t.Errorf("output settled %v, want once (the first request's), the second's reservation standing", got)
	}
}

// With refund_status, a policy that charges after the response settles at
// 0 for those statuses whatever the handler reported.
func TestRefundStatusSettlesAtZero(t *testing.T) {
	fx := newFixture(t, `version: 1
policies:
  - {name: tokens, routes: ["POST /gen"], key: ip, strategy: durable, limit: 100, window: 1h, charge: response, reserve: 10, refund_status: [5xx]}
`, nil)
	for _, status := range []int{503, 200} {
		v := fx.e.Decide(context.Background(), &edgelimit.Input{Method: "POST", Path: "/gen", SourceIP: "192.0.2.1"})
		v.ReportCost(40)
		v.Finish(context.Background(), status)
	}
	if got := sum(fx.limiters["tokens"].n); got != 40 {
		t.Errorf("%d spent, want 40: the 503 settled at 0, the 200 at its report", got)
	}
}
