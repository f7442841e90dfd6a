package powgate_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/powgate"
)

// TestGateSteps walks one key of a policy of 10 units gated above 6 at one
// instant, against every inner limiter: 6 requests go through without work;
// the 7th is challenged and spends nothing; a solved proof buys exactly one
// request; the same proof again is challenged; up to the hard limit each
// proof buys one; past it a valid proof is refused without a challenge
// and is not spent.
func TestGateSteps(t *testing.T) {
	for _, in := range inners {
		t.Run(in.name, func(t *testing.T) {
			f := newFixture(t, in, 10, time.Minute, powgate.Options{Above: 6, Bits: 4, TTL: 10 * time.Minute})
			for i := 1; i <= 6; i++ {
				d := f.allow(keyA, "")
				if !d.Allowed || d.Remaining != int64(10-i) || challengeOf(d) != "" || powgate.Paid(d) {
					t.Fatalf("request %d below the threshold: %+v, want allowed, remaining %d, no challenge", i, d, 10-i)
				}
			}
			d := f.allow(keyA, "")
			proof := mustChallenge(t, "request 7", d)
			if d.Remaining != 4 || d.Limit != 10 || d.Reset != 0 || d.RetryAfter != 0 {
				t.Errorf("challenge = %+v, want remaining 4 of 10, no reset, no retry-after", d)
			}
			if got := f.peekInner(keyA).Remaining; got != 4 {
				t.Fatalf("after the challenge the inner limiter has %d left, want 4: a challenge spends nothing", got)
			}
			// A second challenge, kept for the hard limit below.
			spare := mustChallenge(t, "request 7 again", f.allow(keyA, ""))

			d = f.allow(keyA, proof)
			if !d.Allowed || d.Remaining != 3 || !powgate.Paid(d) {
				t.Fatalf("request 7 with its proof: %+v, want allowed (paid), remaining 3", d)
			}
			d = f.allow(keyA, proof)
			mustChallenge(t, "request 8 replaying the proof of request 7", d)
			if d.Remaining != 3 {
				t.Errorf("replayed proof: remaining %d, want 3 (nothing spent)", d.Remaining)
			}
			for i := 8; i <= 10; i++ {
				p := mustChallenge(t, "request", f.allow(keyA, ""))
				if d := f.allow(keyA, p); !d.Allowed || d.Remaining != int64(10-i) {
					t.Fatalf("request %d with a proof: %+v, want allowed, remaining %d", i, d, 10-i)
				}
			}
			// The hard limit: no challenge without a proof, no admission with one.
			d = f.allow(keyA, "")
			if d.Allowed || challengeOf(d) != "" || d.RetryAfter <= 0 {
				t.Fatalf("request 11 without a proof: %+v, want a plain denial with a Retry-After", d)
			}
			d = f.allow(keyA, spare)
			if d.Allowed || challengeOf(d) != "" || powgate.Paid(d) {
				t.Fatalf("request 11 with a valid proof: %+v, want a plain denial: work cannot buy past the hard limit", d)
			}
			// That proof was not spent: once the quota is back it buys a
			// request (every request needs one above 6 of 10: spend 6 first).
			f.clock.Advance(2 * time.Minute)
			for i := 1; i <= 6; i++ {
				if d := f.allow(keyA, ""); !d.Allowed {
					t.Fatalf("next window, request %d: %+v", i, d)
				}
			}
			if d := f.allow(keyA, spare); !d.Allowed || !powgate.Paid(d) {
				t.Fatalf("the proof the hard limit refused, later: %+v, want admitted by it", d)
			}
		})
	}
}

// counting counts the calls a Gate makes to its inner limiter.
type counting struct {
	edgelimit.Limiter
	allows, peeks, refunds atomic.Int64
}

func (c *counting) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	c.allows.Add(1)
	return c.Limiter.Allow(ctx, req)
}

func (c *counting) Peek(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	c.peeks.Add(1)
	return c.Limiter.(edgelimit.Peeker).Peek(ctx, req)
}

func (c *counting) Refund(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	c.refunds.Add(1)
	return c.Limiter.(edgelimit.Refunder).Refund(ctx, req, d)
}

// TestGateCalls: what each kind of request costs the inner limiter (for
// durable, its store calls). Below the threshold, a peek and an Allow;
// above it a challenge is one peek, with no write; a request with a proof
// is one Allow.
func TestGateCalls(t *testing.T) {
	pol := &policy.Policy{Name: "search", Limit: 10, Window: time.Minute}
	clock := limitertest.NewClock(tw)
	in := &counting{Limiter: inners[0].new(t, pol, clock.Now)}
	g, err := powgate.Wrap(in, powgate.Config{Policy: pol, Options: powgate.Options{Above: 1, Bits: 4}, Secrets: [][]byte{secret}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	calls := func(what string, peeks, allows int64) {
		t.Helper()
		got := [3]int64{in.peeks.Swap(0), in.allows.Swap(0), in.refunds.Swap(0)}
		if want := [3]int64{peeks, allows, 0}; got != want {
			t.Errorf("%s: %d peeks, %d allows, %d refunds; want %d, %d, 0", what, got[0], got[1], got[2], peeks, allows)
		}
	}
	if d, _ := g.Allow(ctx, request(keyA, "")); !d.Allowed {
		t.Fatal(d)
	}
	calls("below the threshold", 1, 1)
	proof := mustChallenge(t, "above the threshold", must(g.Allow(ctx, request(keyA, ""))))
	calls("a challenge", 1, 0)
	if d, _ := g.Allow(ctx, request(keyA, proof)); !d.Allowed {
		t.Fatal(d)
	}
	calls("with a proof", 0, 1)
}

func must(d edgelimit.Decision, err error) edgelimit.Decision {
	if err != nil {
		panic(err)
	}
	return d
}

// TestGateOtherKeys: the threshold is per client key, like the limit.
func TestGateOtherKeys(t *testing.T) {
	f := newFixture(t, inners[0], 10, time.Minute, powgate.Options{Above: 1, Bits: 4})
	f.allow(keyA, "")
	mustChallenge(t, "key A's second request", f.allow(keyA, ""))
	if d := f.allow(keyB, ""); !d.Allowed {
		t.Fatalf("key B's first request: %+v, want allowed without work", d)
	}
}

// TestGateRejectsBadProofs: a proof that is not this client's, this
// policy's, unexpired, well formed and hard enough is treated as absent:
// the request is challenged and nothing is spent.
func TestGateRejectsBadProofs(t *testing.T) {
	const bits = 4
	f := newFixture(t, inners[0], 10, time.Minute, powgate.Options{Above: 0, Bits: bits, TTL: 10 * time.Second})
	issuer := func(t *testing.T, sec []byte, bits int) *pow.Challenger {
		c, err := pow.New(pow.Config{Secrets: [][]byte{sec}, Bits: bits, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	good := issuer(t, secret, bits)
	solved := func(c *pow.Challenger, at time.Time, key, pol string) string {
		return solve(t, c.IssueAt(at, key, pol).Value)
	}
	forged := []byte(solved(good, t0, keyA, "search"))
	forged[40] ^= 'A' ^ 'B' // inside the tag
	if forged[40] == 'A' || forged[40] == 'B' {
		forged[40] = 'C'
	}
	// A challenge of 32 bits that nonce 0 solves once in 2^32.
	unsolved := issuer(t, secret, 32).IssueAt(t0, keyA, "search").Value + ".AAAAAAAAAAA"
	for _, tc := range []struct{ name, proof string }{
		{"forged tag", string(forged)},
		{"expired", solved(good, t0.Add(-10*time.Second), keyA, "search")},
		{"another policy's", solved(good, t0, keyA, "other")},
		{"another client's", solved(good, t0, keyB, "search")},
		{"another secret's", solved(issuer(t, []byte(strings.Repeat("t", 32)), bits), t0, keyA, "search")},
		{"weaker than required", solved(issuer(t, secret, 2), t0, keyA, "search")},
		{"no work", unsolved},
		{"garbage", "not a proof"},
		{"too long", strings.Repeat(solved(good, t0, keyA, "search")+",", 1+pow.MaxProofHeader/pow.ProofLength)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := f.allow(keyA, tc.proof)
			if !powgate.Challenged(d) {
				t.Fatalf("Allow with %s proof = %+v, want a challenge", tc.name, d)
			}
			if got := f.peekInner(keyA).Remaining; got != 10 {
				t.Fatalf("remaining %d after %s proof, want 10: nothing spent", got, tc.name)
			}
		})
	}
	// A good proof among others' in a list is found.
	list := solved(good, t0, keyA, "other") + ", garbage, " + solved(good, t0, keyA, "search")
	if d := f.allow(keyA, list); !d.Allowed || !powgate.Paid(d) {
		t.Fatalf("Allow with a list holding one good proof = %+v, want admitted by it", d)
	}
}

// TestGateRefund: Refund of a decision a proof bought gives back the inner
// units and the proof (the client's retry can present it again); a refund
// of a decision no proof bought gives back no proof, even when the request
// carried one another request had spent.
func TestGateRefund(t *testing.T) {
	for _, in := range []inner{inners[0], kvInner} {
		t.Run(in.name, func(t *testing.T) {
			f := newFixture(t, in, 10, 10*time.Second, powgate.Options{Above: 6, Bits: 4, TTL: time.Minute})
			for range 6 {
				f.allow(keyA, "")
			}
			proof := mustChallenge(t, "request 7", f.allow(keyA, ""))
			d := f.allow(keyA, proof)
			if !d.Allowed {
				t.Fatalf("with proof: %+v", d)
			}
			if err := f.gate.(edgelimit.Refunder).Refund(ctx, request(keyA, proof), d); err != nil {
				t.Fatal(err)
			}
			if got := f.peekInner(keyA).Remaining; got != 4 {
				t.Fatalf("after the refund %d left, want 4", got)
			}
			if d := f.allow(keyA, proof); !d.Allowed || !powgate.Paid(d) {
				t.Fatalf("the refunded proof again: %+v, want admitted by it", d)
			}
			// The proof is spent again. Time passes (within its TTL) until
			// the key is below the threshold: a request carrying the spent
			// proof is admitted without it, and its refund must not give
			// the proof back.
			f.clock.Advance(10 * time.Second)
			d = f.allow(keyA, proof)
			if !d.Allowed || powgate.Paid(d) {
				t.Fatalf("below the threshold with a spent proof: %+v, want allowed, not paid", d)
			}
			if err := f.gate.(edgelimit.Refunder).Refund(ctx, request(keyA, proof), d); err != nil {
				t.Fatal(err)
			}
			for f.peekInner(keyA).Remaining > 4 {
				f.allow(keyA, "")
			}
			if d := f.allow(keyA, proof); !powgate.Challenged(d) {
				t.Fatalf("the spent proof above the threshold after an unrelated refund: %+v, want a challenge", d)
			}
		})
	}
}

// TestGateAbovePercent: a percentage threshold follows the quota the
// decisions announce (for a bucket, its burst).
func TestGateAbovePercent(t *testing.T) {
	f := newFixture(t, inners[0], 10, time.Minute, powgate.Options{AbovePercent: 75, Bits: 4})
	for i := 1; i <= 7; i++ { // 75% of 10 is 7.5, rounded down: 7
		if d := f.allow(keyA, ""); !d.Allowed {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	mustChallenge(t, "request 8", f.allow(keyA, ""))
}

// TestGateCost: a request of several units is gated by where it would
// leave the key, and a proof buys its whole cost.
func TestGateCost(t *testing.T) {
	f := newFixture(t, inners[0], 10, time.Minute, powgate.Options{Above: 6, Bits: 4})
	req := func(proof string) edgelimit.Request { r := request(keyA, proof); r.Cost = 3; return r }
	for i, want := range []bool{true, true} { // 3, 6
		if d, _ := f.gate.Allow(ctx, req("")); d.Allowed != want {
			t.Fatalf("request %d of 3 units: %+v", i+1, d)
		}
	}
	d, _ := f.gate.Allow(ctx, req("")) // would be 9
	proof := mustChallenge(t, "a request to 9 of 10", d)
	if d, _ := f.gate.Allow(ctx, req(proof)); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("3 units with a proof: %+v, want allowed, 1 left", d)
	}
}

// TestGateChallengeResponse: the challenge goes out as the
// Edgelimit-Challenge field and, in the problem body, as the extension
// member {"challenge":{"challenge","bits","expires"}}, expiring TTL after
// the decision; the detail tells the client what to do.
func TestGateChallengeResponse(t *testing.T) {
	f := newFixture(t, inners[0], 10, time.Minute, powgate.Options{Above: 0, Bits: 5, TTL: 30 * time.Second})
	d := f.allow(keyA, "")
	r := d.Response
	if r == nil || r.Field.Name != "Edgelimit-Challenge" || r.Detail != pow.ChallengeDetail {
		t.Fatalf("Response = %+v", r)
	}
	var ext struct{ Challenge pow.Challenge }
	if err := json.Unmarshal([]byte(r.Extension), &ext); err != nil {
		t.Fatalf("extension %s: %v", r.Extension, err)
	}
	if ext.Challenge.Value != r.Field.Value || ext.Challenge.Bits != 5 || !ext.Challenge.Expires.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("extension = %+v, want the field's challenge, 5 bits, expiring at t0+30s", ext.Challenge)
	}
	st, err := pow.ParseChallenge(r.Field.Value)
	if err != nil || st.Bits != 5 {
		t.Fatalf("ParseChallenge = %+v, %v", st, err)
	}
}

// TestGateClock: with its own clock the Gate decides at it (and tells the
// inner limiter, which has none, to decide at it too); without one it
// decides at the Request's At.
func TestGateClock(t *testing.T) {
	pol := &policy.Policy{Name: "search", Limit: 10, Window: time.Minute}
	o := powgate.Options{Above: 0, Bits: 4, TTL: 10 * time.Second}
	for _, own := range []bool{true, false} {
		in := inners[0].new(t, pol, nil) // decides at Request.At
		cfg := powgate.Config{Policy: pol, Options: o, Secrets: [][]byte{secret}}
		if own {
			cfg.Now = func() time.Time { return t0 }
		}
		g, err := powgate.Wrap(in, cfg)
		if err != nil {
			t.Fatal(err)
		}
		req := request(keyA, "")
		req.At = t0
		d, _ := g.Allow(ctx, req)
		proof := mustChallenge(t, "first", d)
		// At is a day later: the proof has expired by the request's clock,
		// not by the Gate's own.
		req = request(keyA, proof)
		req.At = t0.Add(24 * time.Hour)
		d, _ = g.Allow(ctx, req)
		if d.Allowed != own {
			t.Errorf("own clock %v: Allow a day later by Request.At = %+v, want allowed %v", own, d, own)
		}
		// The inner limiter decided at the Gate's instant: its window is t0's.
		if p, _ := in.(edgelimit.Peeker).Peek(ctx, edgelimit.Request{Key: keyA, At: t0}); own && p.Remaining != 9 {
			t.Errorf("own clock: the inner limiter has %d left at t0, want 9: it decided at another instant than the Gate", p.Remaining)
		}
	}
}

// TestGateLocal: the twin of on_store_error: local is gated the same way,
// and a proof is spent once for the Gate and its twin.
func TestGateLocal(t *testing.T) {
	f := newFixture(t, inners[0], 10, time.Minute, powgate.Options{Above: 0, Bits: 4})
	twin, err := f.gate.(interface {
		Local() (edgelimit.Limiter, error)
	}).Local()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := twin.Allow(ctx, request(keyA, ""))
	proof := mustChallenge(t, "the twin", d)
	if d, _ := twin.Allow(ctx, request(keyA, proof)); !d.Allowed {
		t.Fatalf("twin with its proof: %+v", d)
	}
	if d := f.allow(keyA, proof); !powgate.Challenged(d) {
		t.Fatalf("the Gate with the proof the twin spent: %+v, want a challenge", d)
	}
	if got := f.peekInner(keyA).Remaining; got != 10 {
		t.Fatalf("the shared store has %d left, want 10: the twin's state is its own", got)
	}
}

// TestGateForwards: Quota and Peek are the inner limiter's; a peek never
// challenges, even above the threshold.
func TestGateForwards(t *testing.T) {
	pol := &policy.Policy{Name: "search", Limit: 10, Window: 10 * time.Second}
	b := kvInner.new(t, pol, func() time.Time { return t0 })
	g, err := powgate.Wrap(b, powgate.Config{Policy: pol, Options: powgate.Options{Above: 0, Bits: 4}, Secrets: [][]byte{secret}, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	type quota interface{ Quota() (int64, time.Duration) }
	gl, gw := g.(quota).Quota()
	il, iw := b.(quota).Quota()
	if gl != il || gw != iw {
		t.Errorf("Quota() = %d, %s, want the inner's %d, %s", gl, gw, il, iw)
	}
	d, err := g.(edgelimit.Peeker).Peek(ctx, request(keyA, ""))
	if err != nil || !d.Allowed || d.Response != nil {
		t.Errorf("Peek above the threshold = %+v, %v; want the inner's allowed peek, no challenge", d, err)
	}
	if u := g.(*powgate.Gate).Unwrap(); u != b {
		t.Errorf("Unwrap() = %v, want the inner limiter", u)
	}
	if _, ok := g.(edgelimit.BatchLimiter); ok {
		t.Error("a Gate is a BatchLimiter: the engine would decide it in a transaction, past the gate")
	}
}

// faulty is an inner limiter whose store fails on demand (a fake, for the
// error paths only).
type faulty struct {
	edgelimit.Limiter
	failAllow, failPeek, failRefund bool
	// stale makes Peek report a full quota, as a peek that missed other
	// instances' spending would.
	stale bool
}

var errStore = errors.New("store down")

func (f *faulty) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if f.failAllow {
		return edgelimit.Decision{}, errStore
	}
	return f.Limiter.Allow(ctx, req)
}

func (f *faulty) Peek(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if f.failPeek {
		return edgelimit.Decision{}, errStore
	}
	d, err := f.Limiter.(edgelimit.Peeker).Peek(ctx, req)
	if f.stale {
		d.Remaining = d.Limit
	}
	return d, err
}

func (f *faulty) Refund(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	if f.failRefund {
		return errStore
	}
	return f.Limiter.(edgelimit.Refunder).Refund(ctx, req, d)
}

// TestGateSoftRace: a request the peek saw below the threshold whose
// spending lands above it (others spent since the peek) is admitted: the
// threshold is soft. Nothing is refunded.
func TestGateSoftRace(t *testing.T) {
	pol := &policy.Policy{Name: "search", Limit: 10, Window: time.Minute}
	now := func() time.Time { return t0 }
	in := &faulty{Limiter: inners[0].new(t, pol, now), stale: true, failRefund: true}
	g, err := powgate.Wrap(in, powgate.Config{Policy: pol, Options: powgate.Options{Above: 2, Bits: 4}, Secrets: [][]byte{secret}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if d, _ := g.Allow(ctx, request(keyA, "")); !d.Allowed || d.Remaining != int64(10-i) {
			t.Fatalf("request %d, seen below the threshold by a stale peek: %+v, want admitted, %d left", i, d, 10-i)
		}
	}
}

// TestGateStoreErrors: the inner limiter's failure is the Gate's error
// (the engine applies on_store_error), and a proof whose request failed is
// not spent.
func TestGateStoreErrors(t *testing.T) {
	pol := &policy.Policy{Name: "search", Limit: 10, Window: time.Minute}
	now := func() time.Time { return t0 }
	in := &faulty{Limiter: inners[0].new(t, pol, now)}
	g, err := powgate.Wrap(in, powgate.Config{Policy: pol, Options: powgate.Options{Above: 0, Bits: 4}, Secrets: [][]byte{secret}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := g.Allow(ctx, request(keyA, ""))
	proof := mustChallenge(t, "first", d)
	in.failPeek = true
	if _, err := g.Allow(ctx, request(keyA, "")); !errors.Is(err, errStore) {
		t.Errorf("Allow with a failing peek: %v, want the store's error", err)
	}
	in.failPeek, in.failAllow = false, true
	if _, err := g.Allow(ctx, request(keyA, proof)); !errors.Is(err, errStore) {
		t.Errorf("Allow with a proof and a failing store: %v, want the store's error", err)
	}
	in.failAllow = false
	if d, _ := g.Allow(ctx, request(keyA, proof)); !d.Allowed {
		t.Fatalf("the proof of a request the store failed: %+v, want admitted by it", d)
	}
}

// TestWrapRefuses: what Wrap refuses, each with ErrConfig.
func TestWrapRefuses(t *testing.T) {
	pol := &policy.Policy{Name: "search", Limit: 10, Window: time.Minute}
	good := inners[0].new(t, pol, nil)
	ok := powgate.Options{Above: 5}
	onlyAllow := limitertest.LimiterFunc(func(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
		return edgelimit.Decision{}, nil
	})
	for _, tc := range []struct {
		name  string
		inner edgelimit.Limiter
		cfg   powgate.Config
		want  string
	}{
		{"no policy", good, powgate.Config{Options: ok, Secrets: [][]byte{secret}}, "Policy"},
		{"no inner", nil, powgate.Config{Policy: pol, Options: ok, Secrets: [][]byte{secret}}, "no inner"},
		{"no peek", onlyAllow, powgate.Config{Policy: pol, Options: ok, Secrets: [][]byte{secret}}, "cannot peek"},
		{"no secrets", good, powgate.Config{Policy: pol, Options: ok}, "Secrets"},
		{"short secret", good, powgate.Config{Policy: pol, Options: ok, Secrets: [][]byte{[]byte("short")}}, "at least 32"},
		{"bits", good, powgate.Config{Policy: pol, Options: powgate.Options{Bits: 33}, Secrets: [][]byte{secret}}, "Bits"},
		{"ttl", good, powgate.Config{Policy: pol, Options: powgate.Options{TTL: time.Hour}, Secrets: [][]byte{secret}}, "TTL"},
		{"negative above", good, powgate.Config{Policy: pol, Options: powgate.Options{Above: -1}, Secrets: [][]byte{secret}}, "negative"},
		{"percent", good, powgate.Config{Policy: pol, Options: powgate.Options{AbovePercent: 100}, Secrets: [][]byte{secret}}, "AbovePercent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := powgate.Wrap(tc.inner, tc.cfg)
			if !errors.Is(err, powgate.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Wrap = %v, %v; want ErrConfig saying %q", l, err, tc.want)
			}
			if l != nil {
				t.Fatalf("Wrap returned a limiter (%T) with its error", l)
			}
			if strings.Contains(err.Error(), string(secret)) {
				t.Fatal("the error shows the secret")
			}
		})
	}
}
