package powgate_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/client"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/powgate"
)

// tw starts a minute, so that a window of 1m announces t=60.
var tw = time.Unix(1_700_000_040, 0)

// newEngine builds an engine over the durable policies of file on one
// memory store, gating those named in gated with their options.
func newEngine(t *testing.T, file string, clock *limitertest.Clock, gated map[string]powgate.Options) *edgelimit.Engine {
	t.Helper()
	pf, err := policy.Parse("test.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	replay := pow.NewReplayCache(0)
	e, err := edgelimit.New(edgelimit.Config{
		Policies:   pf,
		HashSecret: []byte(strings.Repeat("h", 32)),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:        clock.Now,
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			l, err := durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: clock.Now})
			if err != nil {
				return nil, err
			}
			o, ok := gated[p.Name]
			if !ok {
				return l, nil
			}
			return powgate.Wrap(l, powgate.Config{Policy: p, Options: o, Secrets: [][]byte{secret}, Now: clock.Now, Replay: replay})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestHTTP: through the engine and net/http over real HTTP, a plain client
// sees draft-11 headers below the threshold and a 429 with a challenge
// above it; the client package's Transport solves its way through up to
// the hard limit, and past it gets a 429 that no work can answer.
func TestHTTP(t *testing.T) {
	clock := limitertest.NewClock(tw)
	e := newEngine(t, `version: 1
policies:
  - {name: search, routes: ["GET /search"], key: "header:X-Api-Key", strategy: durable, limit: 5, window: 1m}
`, clock, map[string]powgate.Options{"search": {Above: 2, Bits: 4}})
	srv := httptest.NewServer(middleware.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "results")
	})))
	defer srv.Close()
	get := func(c *http.Client) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/search?q=x", nil)
		req.Header.Set("X-Api-Key", "client-1")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	expect := func(what string, resp *http.Response, status int, headers map[string]string) {
		t.Helper()
		if resp.StatusCode != status {
			t.Fatalf("%s: status %d, want %d", what, resp.StatusCode, status)
		}
		for name, want := range headers {
			if got := resp.Header.Get(name); got != want {
				t.Errorf("%s: %s = %q, want %q", what, name, got, want)
			}
		}
	}

	plain := srv.Client()
	for i := 1; i <= 2; i++ {
		expect("plain request", get(plain), 200, map[string]string{
			"RateLimit-Policy":    `"search";q=5;w=60`,
			"RateLimit":           `"search";r=` + strconv.Itoa(5-i) + `;t=60`,
			"Edgelimit-Challenge": "",
		})
	}
	resp := get(plain)
	expect("plain request above the threshold", resp, 429, map[string]string{
		"RateLimit-Policy": `"search";q=5;w=60`,
		"RateLimit":        `"search";r=3`, // nothing spent; no effective window without work
		"Retry-After":      "1",
		"Content-Type":     "application/problem+json",
	})
	challenge := resp.Header.Get("Edgelimit-Challenge")
	if st, err := pow.ParseChallenge(challenge); err != nil || st.Bits != 4 {
		t.Fatalf("Edgelimit-Challenge %q: %+v, %v", challenge, st, err)
	}
	var problem struct {
		Type      string
		Status    int
		Detail    string
		Violated  []string `json:"violated-policies"`
		Challenge pow.Challenge
	}
	if err := json.NewDecoder(resp.Body).Decode(&problem); err != nil {
		t.Fatal(err)
	}
	if problem.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || problem.Status != 429 || len(problem.Violated) != 1 || problem.Violated[0] != "search" ||
		!strings.Contains(problem.Detail, pow.ChallengeDetail) || problem.Challenge.Value != challenge || problem.Challenge.Bits != 4 ||
		!problem.Challenge.Expires.Equal(tw.Add(pow.DefaultTTL)) {
		t.Fatalf("problem body = %+v", problem)
	}

	var events []client.EventKind
	tr := &client.Transport{NoWait: true, Now: clock.Now, Observe: func(ev client.Event) { events = append(events, ev.Kind) }}
	solver := tr.Client()
	for i := 3; i <= 5; i++ {
		expect("client request", get(solver), 200, map[string]string{
			"RateLimit": `"search";r=` + strconv.Itoa(5-i) + `;t=60`,
		})
	}
	if want := strings.Repeat("challenge solved ", 3); eventString(events) != want {
		t.Errorf("client events %q, want %q: one challenge per request above the threshold", eventString(events), want)
	}
	events = nil
	expect("client request past the hard limit", get(solver), 429, map[string]string{
		"RateLimit":           `"search";r=0;t=60`,
		"Retry-After":         "60",
		"Edgelimit-Challenge": "",
	})
	if eventString(events) != "give-up " {
		t.Errorf("client events past the hard limit %q, want only give-up: no challenge to solve", eventString(events))
	}
	// A minute later the window is new: no work below the threshold.
	clock.Advance(time.Minute)
	expect("next window", get(plain), 200, map[string]string{"RateLimit": `"search";r=4;t=60`})
}

func eventString(ks []client.EventKind) string {
	var b strings.Builder
	for _, k := range ks {
		b.WriteString(k.String() + " ")
	}
	return b.String()
}

// TestEngineRefundsPaidRequest: a gated durable policy is decided alone,
// before the route's other durable policies (which the engine commits in
// one transaction without it). When another policy denies a request a
// proof paid for, the engine refunds the gated policy: its units come
// back, and so does the proof, which a retry can present again.
func TestEngineRefundsPaidRequest(t *testing.T) {
	clock := limitertest.NewClock(tw)
	e := newEngine(t, `version: 1
policies:
  - {name: burst, routes: ["GET /paid"], key: "header:X-Api-Key", strategy: durable, limit: 10, window: 1m}
  - {name: daily, routes: ["GET /paid"], key: "header:X-Api-Key", strategy: durable, limit: 2, window: 30s}
`, clock, map[string]powgate.Options{"burst": {Above: 0, Bits: 4, TTL: time.Minute}})
	decide := func(proof string) *edgelimit.Verdict {
		h := limitertest.Headers{"x-api-key": "client-1"}
		if proof != "" {
			h["edgelimit-proof"] = proof
		}
		return e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/paid", SourceIP: "192.0.2.1", Header: h})
	}
	field := func(v *edgelimit.Verdict, name string) string {
		for _, f := range v.Header() {
			if f.Name == name {
				return f.Value
			}
		}
		return ""
	}
	solveVerdict := func(what string, v *edgelimit.Verdict) string {
		t.Helper()
		ch := field(v, "Edgelimit-Challenge")
		if v.Allowed || ch == "" {
			t.Fatalf("%s: allowed %v, challenge %q; want a challenge", what, v.Allowed, ch)
		}
		return solve(t, ch)
	}
	// Three challenges while daily still has room (a challenge beside
	// daily's denial would be left out of the 429: work cannot lift it).
	var proofs []string
	for range 3 {
		proofs = append(proofs, solveVerdict("request", decide("")))
	}
	for i := 1; i <= 2; i++ {
		if v := decide(proofs[i-1]); !v.Allowed {
			t.Fatalf("request %d with a proof: %+v", i, v)
		}
	}
	if v := decide(""); v.Status != 429 || field(v, "Edgelimit-Challenge") != "" || !strings.Contains(string(v.Body), `"violated-policies":["burst","daily"]`) {
		t.Fatalf("request 3 without a proof, past daily: %d %s, challenge %q; want both named, no challenge", v.Status, v.Body, field(v, "Edgelimit-Challenge"))
	}
	p := proofs[2]
	v := decide(p)
	if v.Allowed || v.Status != 429 || field(v, "Edgelimit-Challenge") != "" || !strings.Contains(string(v.Body), `"violated-policies":["daily"]`) {
		t.Fatalf("request 3 with a proof, past daily: %d %s, challenge %q; want daily's 429 alone", v.Status, v.Body, field(v, "Edgelimit-Challenge"))
	}
	if want := `"burst";r=8;t=60, "daily";r=0;t=30`; !strings.HasPrefix(field(v, "RateLimit"), want) {
		t.Errorf("RateLimit = %q, want it to start %q: burst's spending refunded", field(v, "RateLimit"), want)
	}
	// The refunded proof is good again: once daily's window is over, the
	// retry with the same proof goes through, paid by it.
	clock.Advance(30 * time.Second)
	v = decide(p)
	if !v.Allowed || len(v.Decisions) != 2 || !powgate.Paid(v.Decisions[0]) {
		t.Fatalf("the retry with the refunded proof: %d %s %+v; want admitted, paid by the proof", v.Status, v.Body, v.Decisions)
	}
	if p2 := solveVerdict("and then", decide(p)); p2 == p {
		t.Fatal("the same challenge twice")
	}
}

// TestProofBuysTheReservation: a policy that charges after the response,
// gated: below the threshold a request reserves without work; above it, it
// is challenged, and a proof buys its reservation; after the response the
// reservation is settled with the reported cost, by the durable limiter.
func TestProofBuysTheReservation(t *testing.T) {
	clock := limitertest.NewClock(tw)
	e := newEngine(t, `version: 1
policies:
  - {name: tokens, routes: ["POST /gen"], key: "header:X-Api-Key", strategy: durable, limit: 100, window: 1m,
     charge: response, reserve: 10, proof_of_work: {above: 50}}
`, clock, map[string]powgate.Options{"tokens": {Above: 50, Bits: 4, TTL: time.Minute}})
	do := func(proof string, cost int64) *edgelimit.Verdict {
		h := limitertest.Headers{"x-api-key": "client-1"}
		if proof != "" {
			h["edgelimit-proof"] = proof
		}
		v := e.Decide(context.Background(), &edgelimit.Input{Method: "POST", Path: "/gen", SourceIP: "192.0.2.1", Header: h})
		if v.Allowed {
			v.ReportCost(cost)
			v.Finish(context.Background(), 200)
		}
		return v
	}
	field := func(v *edgelimit.Verdict, name string) string {
		for _, f := range v.Header() {
			if f.Name == name {
				return f.Value
			}
		}
		return ""
	}
	// 45 used: each reserved 10 (below the threshold), settled at 15.
	for i := range 3 {
		if v := do("", 15); !v.Allowed {
			t.Fatalf("request %d below the threshold: %d %s", i+1, v.Status, v.Body)
		}
	}
	// 45 + a reservation of 10 is above 50: a challenge, nothing spent.
	v := do("", 15)
	ch := field(v, "Edgelimit-Challenge")
	if v.Allowed || ch == "" {
		t.Fatalf("above the threshold: %d, challenge %q; want a challenge", v.Status, ch)
	}
	v = do(solve(t, ch), 2)
	if !v.Allowed || !powgate.Paid(v.Decisions[0]) {
		t.Fatalf("with a proof: %d %s; want admitted, paid", v.Status, v.Body)
	}
	if want := `"tokens";r=55;`; !strings.HasPrefix(field(v, "RateLimit"), want) {
		t.Errorf("RateLimit %q, want %s (what was left before the reservation)", field(v, "RateLimit"), want)
	}
	// Settled at 2: 47 used, 53 left.
	d, err := e.Limiter("tokens").(edgelimit.Unwrapper).Unwrap().(edgelimit.Peeker).Peek(context.Background(), edgelimit.Request{Key: keyOf(t, e, "tokens", "client-1")})
	if err != nil || d.Remaining != 53 {
		t.Errorf("after the paid request settled at 2: %+v, %v; want 53 left", d, err)
	}
}

func keyOf(t *testing.T, e *edgelimit.Engine, policy, raw string) string {
	t.Helper()
	k, err := e.KeyOf(policy, raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
