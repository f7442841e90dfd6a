package powgate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/powgate"
)

var (
	t0     = time.Unix(1_700_000_000, 0)
	secret = []byte(strings.Repeat("s", 32))
	ctx    = context.Background()
)

// The hashed client keys of the tests (the engine's are 22 characters).
const (
	keyA = "x4mrL0ZvN1cQ9bAqP7sT2w"
	keyB = "Qm9uam91ciBsZSBtb25kZQ"
)

// inner is a way to build the limiter a Gate wraps, on a fresh store.
type inner struct {
	name string
	new  func(t testing.TB, p *policy.Policy, now func() time.Time) edgelimit.Limiter
}

func durableInner(alg durablecounter.Algorithm, denyCache bool) inner {
	name := "durable/" + string(alg)
	if denyCache {
		name += "+deny-cache"
	}
	return inner{name, func(t testing.TB, p *policy.Policy, now func() time.Time) edgelimit.Limiter {
		t.Helper()
		o := &durablecounter.Options{Algorithm: alg, DenyCache: denyCache}
		c, err := durablecounter.New(durablecounter.Config{Policy: p, Options: o, Store: durablecounter.NewMemory(durablecounter.MemoryConfig{}), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}}
}

var kvInner = inner{"kv", func(t testing.TB, p *policy.Policy, now func() time.Time) edgelimit.Limiter {
	t.Helper()
	b, err := kvbucket.New(kvbucket.Config{Policy: p, KV: kvbucket.NewMemory(kvbucket.MemoryConfig{Now: now}), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return b
}}

// inners are every limiter a Gate is meant for.
var inners = []inner{
	durableInner(durablecounter.FixedWindow, false),
	durableInner(durablecounter.FixedWindow, true),
	durableInner(durablecounter.SlidingWindow, true),
	durableInner(durablecounter.SlidingLog, true),
	durableInner(durablecounter.GCRA, true),
	kvInner,
}

// fixture is a Gate around a fresh inner limiter, on a test clock.
type fixture struct {
	t     testing.TB
	clock *limitertest.Clock
	pol   *policy.Policy
	inner edgelimit.Limiter
	gate  edgelimit.Limiter
}

func newFixture(t testing.TB, in inner, limit int64, window time.Duration, o powgate.Options) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: limitertest.NewClock(t0), pol: &policy.Policy{Name: "search", Limit: limit, Window: window, Cost: 1}}
	f.inner = in.new(t, f.pol, f.clock.Now)
	var err error
	f.gate, err = powgate.Wrap(f.inner, powgate.Config{Policy: f.pol, Options: o, Secrets: [][]byte{secret}, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// allow asks the Gate for one unit for key, with the Edgelimit-Proof
// header proof (none when empty).
func (f *fixture) allow(key, proof string) edgelimit.Decision {
	f.t.Helper()
	d, err := f.gate.Allow(ctx, request(key, proof))
	if err != nil {
		f.t.Fatalf("Allow(%q): %v", key, err)
	}
	return d
}

// peekInner reports the inner limiter's state for key, spending nothing.
func (f *fixture) peekInner(key string) edgelimit.Decision {
	f.t.Helper()
	d, err := f.inner.(edgelimit.Peeker).Peek(ctx, edgelimit.Request{Key: key})
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

func request(key, proof string) edgelimit.Request {
	req := edgelimit.Request{Key: key, Cost: 1}
	if proof != "" {
		req.Header = limitertest.Headers{"edgelimit-proof": proof}
	}
	return req
}

// challengeOf returns the challenge d carries, or "".
func challengeOf(d edgelimit.Decision) string {
	if d.Response == nil || d.Response.Field.Name != powgate.HeaderChallenge {
		return ""
	}
	return d.Response.Field.Value
}

// solve solves a challenge on one core.
func solve(t testing.TB, challenge string) string {
	t.Helper()
	s := pow.Solver{Workers: 1}
	p, err := s.Solve(ctx, challenge)
	if err != nil {
		t.Fatalf("Solve(%q): %v", challenge, err)
	}
	return p
}

// mustChallenge asserts that d is a challenge and returns its proof,
// solved.
func mustChallenge(t testing.TB, what string, d edgelimit.Decision) string {
	t.Helper()
	ch := challengeOf(d)
	if d.Allowed || ch == "" || !powgate.Challenged(d) {
		t.Fatalf("%s: %+v, want a challenge", what, d)
	}
	return solve(t, ch)
}
