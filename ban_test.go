package edgelimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/bans"
	"github.com/edgelimit/edgelimit/internal/banrule"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/metrics"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/memory"
)

// countingBans counts the calls an engine makes of its ban store.
type countingBans struct {
	edgelimit.BanStore
	reads, counts atomic.Int64
	fail          atomic.Bool
}

func (c *countingBans) ReadBan(ctx context.Context, k banrule.Key) (banrule.State, error) {
	c.reads.Add(1)
	if c.fail.Load() {
		return banrule.State{}, errors.New("ban store down")
	}
	return c.BanStore.ReadBan(ctx, k)
}

func (c *countingBans) CountDenial(ctx context.Context, k banrule.Key, r banrule.Rule, t time.Time) (banrule.Outcome, error) {
	c.counts.Add(1)
	if c.fail.Load() {
		return banrule.Outcome{}, errors.New("ban store down")
	}
	return c.BanStore.CountDenial(ctx, k, r, t)
}

// limiterCalls counts a limiter's Allow calls.
type limiterCalls struct {
	edgelimit.Limiter
	n *atomic.Int64
}

func (l limiterCalls) Allow(ctx context.Context, r edgelimit.Request) (edgelimit.Decision, error) {
	l.n.Add(1)
	return l.Limiter.Allow(ctx, r)
}

const banPolicy = `version: 1
policies:
  - name: api
    routes: ["GET /v"]
    key: header:X-Api-Key
    strategy: durable
    algorithm: fixed-window
    limit: 1
    window: 1m
    ban: {after: 2, within: 10m, for: 15m, growth: 2, max: 1h, decay: 2h, staleness: 1s}
`

type banFixture struct {
	e      *edgelimit.Engine
	clock  *limitertest.Clock
	store  *countingBans
	calls  *atomic.Int64
	mu     sync.Mutex
	events []edgelimit.Event
}

// newBanEngine builds an engine of file on the in-process durable backend,
// with store as its ban store and clock as its clock.
func newBanEngine(t *testing.T, file string, store edgelimit.BanStore, clock *limitertest.Clock) *banFixture {
	t.Helper()
	f, err := policy.Parse("ban.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	build, err := setup.Limiters(f, []setup.Backend{memory.Durable()}, setup.BackendEnv{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	fx := &banFixture{clock: clock, store: &countingBans{BanStore: store}, calls: new(atomic.Int64)}
	fx.e, err = edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)), Now: clock.Now, Bans: fx.store,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observe: func(ev edgelimit.Event) {
			fx.mu.Lock()
			fx.events = append(fx.events, ev)
			fx.mu.Unlock()
		},
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			l, err := build(p)
			return limiterCalls{l, fx.calls}, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

func (fx *banFixture) get(key string) (status int, retry string, body map[string]any, rl string) {
	v := fx.e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/v", SourceIP: "192.0.2.1",
		Header: limitertest.Headers(map[string]string{"X-Api-Key": key})})
	defer v.Release()
	status = v.Status
	if v.Allowed {
		status = 200
	}
	if len(v.Body) > 0 {
		if err := json.Unmarshal(v.Body, &body); err != nil {
			panic(err)
		}
	}
	return status, header(v, "Retry-After"), body, header(v, "RateLimit")
}

// TestBanGrowsAtFixedInstants walks one key through a run of bans: the
// second denial within 10m bans it for 15m, the next bans of the run last
// 30m, then 1h (the max), and after 2h of quiet the next is 15m again.
func TestBanGrowsAtFixedInstants(t *testing.T) {
	clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour))
	fx := newBanEngine(t, banPolicy, bans.NewMemory(clock.Now), clock)
	start := clock.Now()
	// offend: one admitted request in a fresh minute, then two denials,
	// the second of which bans for want.
	offend := func(at time.Duration, want time.Duration, level int) {
		t.Helper()
		clock.Set(start.Add(at))
		if st, _, _, _ := fx.get("k"); st != 200 {
			t.Fatalf("at +%s: first request: %d, want 200", at, st)
		}
		if st, retry, body, _ := fx.get("k"); st != 429 || body["ban"] != nil || retry != "60" {
			t.Fatalf("at +%s: first denial: %d, Retry-After %s, body %v; want a plain 429 of the minute", at, st, retry, body)
		}
		st, retry, body, rl := fx.get("k")
		secs := int64(want / time.Second)
		if wantRetry := itoa(secs); st != 429 || retry != wantRetry {
			t.Fatalf("at +%s: second denial: %d, Retry-After %s; want 429 banning for %s (%s)", at, st, retry, want, wantRetry)
		}
		ban, _ := body["ban"].(map[string]any)
		if ban == nil || ban["policy"] != "api" || ban["level"] != float64(level) ||
			ban["until"] != start.Add(at+want).UTC().Format(time.RFC3339) {
			t.Fatalf("at +%s: ban member %v, want policy api, level %d, until +%s", at, body["ban"], level, at+want)
		}
		if d, _ := body["detail"].(string); !strings.Contains(d, `banned by policy "api" until`) {
			t.Errorf("detail %q does not name the ban", d)
		}
		if want := `"api";r=0;t=` + itoa(secs); rl != want {
			t.Errorf("RateLimit %q, want %q", rl, want)
		}
		// While banned, no limiter is asked and the store not called.
		calls, reads, counts := fx.calls.Load(), fx.store.reads.Load(), fx.store.counts.Load()
		clock.Set(start.Add(at + want - time.Millisecond))
		if st, retry, _, _ := fx.get("k"); st != 429 || retry != "1" {
			t.Fatalf("just before the ban's end: %d, Retry-After %s; want 429, 1", st, retry)
		}
		clock.Set(start.Add(at + want/2))
		for range 5 {
			fx.get("k")
		}
		if fx.calls.Load() != calls || fx.store.counts.Load() != counts {
			t.Errorf("a banned key asked the limiter (%d calls) or counted denials (%d)", fx.calls.Load()-calls, fx.store.counts.Load()-counts)
		}
		if got := fx.store.reads.Load() - reads; got > 2 {
			t.Errorf("a banned key cost %d reads of the ban store over two instants; want at most one per staleness each", got)
		}
	}
	offend(0, 15*time.Minute, 1)
	offend(20*time.Minute, 30*time.Minute, 2)
	offend(60*time.Minute, time.Hour, 3)
	offend(130*time.Minute, time.Hour, 4) // capped at max
	// The last ban ended at +190m; 2h later the run has decayed.
	offend(190*time.Minute+2*time.Hour, 15*time.Minute, 1)

	// Denials further apart than within do not add up.
	clock.Set(start.Add(10 * time.Hour))
	fx.get("j")
	fx.get("j") // denial 1
	clock.Set(start.Add(10*time.Hour + 11*time.Minute))
	fx.get("j")
	if st, _, body, _ := fx.get("j"); st != 429 || body["ban"] != nil {
		t.Errorf("denials 11m apart banned the key (within is 10m): %d %v", st, body)
	}

	fx.mu.Lock()
	banned := 0
	for _, ev := range fx.events {
		if ev.Reason == "banned" {
			banned++
			if ev.Allowed || ev.Policy != "api" {
				t.Errorf("banned event %+v", ev)
			}
		}
	}
	fx.mu.Unlock()
	if banned == 0 {
		t.Error("no metrics event has Reason banned")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestBanSharedByInstances: a ban one engine starts is known to another
// sharing the store within the policy's staleness, for one read; a lift
// on one applies on it at once and on the other within staleness.
func TestBanSharedByInstances(t *testing.T) {
	clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour))
	store := bans.NewMemory(clock.Now)
	a, b := newBanEngine(t, banPolicy, store, clock), newBanEngine(t, banPolicy, store, clock)
	start := clock.Now()
	if st, _, _, _ := b.get("k"); st != 200 { // b reads: no ban, for a second
		t.Fatalf("b: %d", st)
	}
	a.get("k")
	a.get("k")
	if st, _, body, _ := a.get("k"); st != 429 || body["ban"] == nil {
		t.Fatalf("a did not ban after two denials: %d %v", st, body)
	}
	clock.Set(start.Add(2 * time.Second)) // b's knowledge is stale: one read
	reads := b.store.reads.Load()
	for range 10 {
		if st, _, body, _ := b.get("k"); st != 429 || body["ban"] == nil {
			t.Fatalf("b does not apply a's ban: %d %v", st, body)
		}
	}
	if got := b.store.reads.Load() - reads; got != 1 {
		t.Errorf("b read the ban %d times in one staleness, want 1", got)
	}
	info, err := b.e.Ban(context.Background(), "api", "k")
	if err != nil || !info.Banned || info.Level != 1 || !info.Until.Equal(start.Add(15*time.Minute)) {
		t.Fatalf("Ban = %+v, %v; want banned until +15m, level 1", info, err)
	}
	if err := a.e.Unban(context.Background(), "api", "k"); err != nil {
		t.Fatal(err)
	}
	// In the next minute (each engine's limiter here counts apart), when
	// what b read at +2s is stale.
	clock.Set(start.Add(time.Minute))
	if st, _, body, _ := a.get("k"); st != 200 {
		t.Errorf("a still refuses after its Unban: %d %v", st, body)
	}
	if st, _, body, _ := b.get("k"); st != 200 {
		t.Errorf("b still bans a staleness after the Unban: %v", body)
	}
	info, err = b.e.Ban(context.Background(), "api", "k")
	if err != nil || info.Banned || info.Level != 0 {
		t.Errorf("Ban after Unban = %+v, %v; want no ban, level 0", info, err)
	}
}

// TestBanStoreFailing: a ban store that fails never blocks a request (the
// limiters decide) and keeps a ban the instance knew.
func TestBanStoreFailing(t *testing.T) {
	clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour))
	fx := newBanEngine(t, banPolicy, bans.NewMemory(clock.Now), clock)
	fx.get("k")
	fx.get("k")
	fx.get("k") // banned
	fx.store.fail.Store(true)
	clock.Advance(5 * time.Second)
	if st, _, body, _ := fx.get("k"); st != 429 || body["ban"] == nil {
		t.Errorf("a failing store lost the ban the instance knew: %d %v", st, body)
	}
	if st, _, _, _ := fx.get("other"); st != 200 {
		t.Errorf("a failing ban store refused a key with no ban: %d", st)
	}
}

func TestBanErrors(t *testing.T) {
	// inflight cannot ban (signed's refusal is in policy's tests, which
	// do not link inflight).
	_, err := policy.Parse("ban.yaml", []byte("version: 1\npolicies:\n  - {name: j, routes: [\"GET /j\"], key: ip, strategy: inflight, limit: 2, window: 1m, ban: {after: 1, for: 1m}}\n"))
	if err == nil || !strings.Contains(err.Error(), "strategy inflight cannot ban") {
		t.Errorf("a ban on inflight: %v", err)
	}
	f, err := policy.Parse("ban.yaml", []byte(banPolicy))
	if err != nil {
		t.Fatal(err)
	}
	_, err = edgelimit.New(edgelimit.Config{Policies: f, Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) { return &counter{p: p}, nil }})
	if err == nil || !strings.Contains(err.Error(), "Config.Bans is nil") {
		t.Errorf("New without Config.Bans: %v", err)
	}
	clock := limitertest.NewClock(limitertest.T0)
	fx := newBanEngine(t, strings.Replace(banPolicy, "    ban: {after: 2, within: 10m, for: 15m, growth: 2, max: 1h, decay: 2h, staleness: 1s}\n", "", 1)+
		"  - {name: b, routes: [\"GET /b\"], key: ip, strategy: durable, limit: 1, window: 1m, ban: {after: 1, for: 1m}}\n", bans.NewMemory(clock.Now), clock)
	if err := fx.e.Unban(context.Background(), "api", "k"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Unban of a policy without a ban: %v", err)
	}
	if _, err := fx.e.Ban(context.Background(), "nope", "k"); err == nil {
		t.Error("Ban of an unknown policy: no error")
	}
	if _, err := fx.e.Ban(context.Background(), "b", "not an address"); err == nil {
		t.Error("Ban of a bad key: no error")
	}
}

// TestBanEMFReason: the EMF decision line of a banned request carries
// Reason banned.
func TestBanEMFReason(t *testing.T) {
	clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour))
	fx := newBanEngine(t, banPolicy, bans.NewMemory(clock.Now), clock)
	var buf bytes.Buffer
	m, err := metrics.NewEMF(metrics.EMFConfig{Writer: &buf, Namespace: "Test", Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	fx.mu.Lock()
	fx.events = nil
	fx.mu.Unlock()
	for range 4 {
		fx.get("k")
	}
	fx.mu.Lock()
	for _, ev := range fx.events {
		m.Observe(ev)
	}
	fx.mu.Unlock()
	banned := 0
	for line := range strings.Lines(buf.String()) {
		var doc map[string]any
		if err := json.Unmarshal([]byte(line), &doc); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if doc[metrics.PropertyReason] == "banned" {
			banned++
		}
	}
	if banned != 2 { // the denial that bans, and the request after it
		t.Errorf("%d EMF lines with Reason banned, want 2:\n%s", banned, buf.String())
	}
}
