package middleware_test

// Tests of the engine behaviour the adapters rely on, pinning the
// performance edits made to the root package alongside this one.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/keyhash"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// funcEngine builds an engine whose every policy is decided by allow.
func funcEngine(t *testing.T, policies string, allow func(p *policy.Policy, ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error)) *edgelimit.Engine {
	t.Helper()
	f, err := policy.Parse("test.yaml", []byte(policies))
	if err != nil {
		t.Fatal(err)
	}
	e, err := edgelimit.New(edgelimit.Config{
		Policies: f, HashSecret: testSecret, Logger: discardLogger,
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return limitertest.LimiterFunc(func(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
				return allow(p, ctx, req)
			}), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// onePolicy's budget is the longest a policy may set: TestLimiterContext checks
// that the budget has not run out during the call, which a loaded machine
// must not be able to make false.
const onePolicy = `
version: 1
policies:
  - name: p
    routes: ["ANY /*"]
    key: ip
    strategy: durable
    limit: 10
    window: 1m
    store_timeout: 30s
`

type ctxKey struct{}

// TestLimiterContext: the context a limiter gets behaves as
// context.WithTimeout(parent, store_timeout) did, before and after the
// engine starts its timer lazily.
func TestLimiterContext(t *testing.T) {
	var seen []context.Context
	var mu sync.Mutex
	e := funcEngine(t, onePolicy, func(p *policy.Policy, ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
		mu.Lock()
		seen = append(seen, ctx)
		mu.Unlock()
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > p.StoreTimeout || time.Until(dl) <= 0 {
			t.Errorf("Deadline() = %v, %v; want within %s from now", dl, ok, p.StoreTimeout)
		}
		if err := ctx.Err(); err != nil {
			t.Errorf("Err() during the call = %v, want nil", err)
		}
		if req.Key == "" {
			t.Errorf("empty key")
		}
		return edgelimit.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
	})
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	in := &edgelimit.Input{Method: "GET", Path: "/x", SourceIP: "203.0.113.7"}

	// A limiter that never looks at Done: after the call the context is
	// cancelled, and Done, Value and Cause still work.
	if v := e.Decide(parent, in); !v.Allowed {
		t.Fatalf("Decide: %+v", v)
	}
	ctx := seen[0]
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err() after the call = %v, want context.Canceled", err)
	}
	select {
	case <-ctx.Done():
	default:
		t.Errorf("Done() not closed after the call")
	}
	if got := ctx.Value(ctxKey{}); got != "v" {
		t.Errorf("Value = %v, want the parent's value", got)
	}
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Cause = %v, want context.Canceled", err)
	}

	// A parent with an earlier deadline wins.
	short, cancel := context.WithTimeout(parent, 50*time.Millisecond)
	defer cancel()
	pdl, _ := short.Deadline()
	e2 := funcEngine(t, onePolicy, func(_ *policy.Policy, ctx context.Context, _ edgelimit.Request) (edgelimit.Decision, error) {
		if dl, _ := ctx.Deadline(); !dl.Equal(pdl) {
			t.Errorf("Deadline() = %v, want the parent's %v", dl, pdl)
		}
		return edgelimit.Decision{Allowed: true}, nil
	})
	e2.Decide(short, in)

	// A cancelled parent is seen by Err without Done.
	done, cancelDone := context.WithCancel(parent)
	cancelDone()
	e3 := funcEngine(t, onePolicy, func(_ *policy.Policy, ctx context.Context, _ edgelimit.Request) (edgelimit.Decision, error) {
		if err := ctx.Err(); !errors.Is(err, context.Canceled) {
			t.Errorf("Err() with a cancelled parent = %v, want context.Canceled", err)
		}
		return edgelimit.Decision{}, ctx.Err()
	})
	if v := e3.Decide(done, in); v.Status != 503 {
		t.Errorf("cancelled parent, fail-closed policy: status %d, want 503", v.Status)
	}
}

// TestLimiterContextExpires: a limiter that waits on Done is released by the
// store_timeout budget, and the policy's on_store_error decides.
func TestLimiterContextExpires(t *testing.T) {
	policies := strings.Replace(onePolicy, "store_timeout: 30s", "store_timeout: 1ms", 1)
	var got error
	e := funcEngine(t, policies, func(_ *policy.Policy, ctx context.Context, _ edgelimit.Request) (edgelimit.Decision, error) {
		<-ctx.Done() // a store that never answers
		got = context.Cause(ctx)
		return edgelimit.Decision{}, ctx.Err()
	})
	for _, a := range adapters {
		r := a.build(t, e, nil, nil)(call{Method: "GET", Path: "/x", IP: "203.0.113.7"})
		if r.Status != 503 || r.Ran || r.Header.Get("Retry-After") != "1" ||
			!strings.Contains(r.Body, "temporary-reduced-capacity") {
			t.Errorf("%s: store timeout gave %d, ran %v, Retry-After %q, body %s; want 503 with a problem body",
				a.name, r.Status, r.Ran, r.Header.Get("Retry-After"), r.Body)
		}
		if !errors.Is(got, context.DeadlineExceeded) {
			t.Errorf("%s: Cause = %v, want context.DeadlineExceeded", a.name, got)
		}
	}
}

// TestKeyHashUnchanged pins the stored key format: HMAC-SHA256 over the
// policy name, a zero byte and the raw key, 128 bits in base64url.
func TestKeyHashUnchanged(t *testing.T) {
	h, err := keyhash.New(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ pol, raw string }{
		{"paid", "h:key-1"},
		{"pair-ip", "i:203.0.113.7/32"},
		{"p", strings.Repeat("x", 5000)},
		{"", ""},
	} {
		m := hmac.New(sha256.New, testSecret)
		m.Write([]byte(tt.pol + "\x00" + tt.raw))
		want := base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
		for range 2 { // the second call reuses the pooled state
			if got := h.Hash(tt.pol, []byte(tt.raw)); got != want {
				t.Errorf("Hash(%q, %.20q) = %q, want %q", tt.pol, tt.raw, got, want)
			}
		}
	}
}

// TestClientState: a limiter reads its client state (the signed strategy's
// Edgelimit-Token and Edgelimit-Proof) from the request's headers, and the
// field it hands back reaches the client, through every adapter.
func TestClientState(t *testing.T) {
	const policies = `
version: 1
policies:
  - name: tts
    routes: ["POST /tts"]
    key: ip
    strategy: signed
    limit: 10
    window: 1m
  - name: durable
    routes: ["POST /tts"]
    key: ip
    strategy: durable
    limit: 10
    window: 1m
`
	for _, a := range adapters {
		var mu sync.Mutex
		got := map[string]edgelimit.Request{}
		e := funcEngine(t, policies, func(p *policy.Policy, _ context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
			mu.Lock()
			got[p.Name] = req
			mu.Unlock()
			d := edgelimit.Decision{Allowed: true, Limit: 10, Remaining: 9}
			if p.StrategyName() == "signed" {
				d.Response = &edgelimit.Response{Field: edgelimit.Field{Name: "Edgelimit-Token", Value: "new-token"}}
			}
			return d, nil
		})
		run := a.build(t, e, nil, nil)
		r := run(call{Method: "POST", Path: "/tts", IP: "203.0.113.7",
			Header: map[string]string{"Edgelimit-Token": "tok", "Edgelimit-Proof": "proof"}})
		if r.Status != 200 || r.Header.Get("Edgelimit-Token") != "new-token" {
			t.Errorf("%s: status %d, Edgelimit-Token %q; want 200 and the new token", a.name, r.Status, r.Header.Get("Edgelimit-Token"))
		}
		req := got["tts"]
		if req.Header == nil || req.Header.Get("edgelimit-token") != "tok" || req.Header.Get("Edgelimit-Proof") != "proof" {
			t.Errorf("%s: signed policy's request headers %v; want Edgelimit-Token tok and Edgelimit-Proof proof", a.name, req.Header)
		}
	}
}

// TestLegacyHeadersOff: with legacy_headers: false only the RateLimit
// headers are sent, and Retry-After still is on a 429.
func TestLegacyHeadersOff(t *testing.T) {
	policies := strings.Replace(testPolicies, "version: 1\n", "version: 1\nlegacy_headers: false\n", 1)
	for _, a := range adapters {
		e, _ := newEngine(t, policies)
		run := a.build(t, e, nil, nil)
		var r result
		for range 4 {
			r = run(get("/paid/x", "key-1"))
		}
		if r.Status != 429 || r.Header.Get("Retry-After") != "60" || r.Header.Get("RateLimit") != `"paid";r=0;t=60` {
			t.Errorf("%s: %d, Retry-After %q, RateLimit %q; want 429, 60, \"paid\";r=0;t=60",
				a.name, r.Status, r.Header.Get("Retry-After"), r.Header.Get("RateLimit"))
		}
		for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if v := r.Header.Values(h); len(v) != 0 {
				t.Errorf("%s: %s = %q with legacy_headers: false", a.name, h, v)
			}
		}
	}
}

// TestStoreFailure: a failing store is a 503 for a fail-closed policy and
// an allowed request for a fail-open one, identically through every adapter.
func TestStoreFailure(t *testing.T) {
	const policies = `
version: 1
policies:
  - name: closed
    routes: ["GET /closed"]
    key: ip
    strategy: durable
    limit: 10
    window: 1m
  - name: open
    routes: ["GET /open"]
    key: ip
    strategy: kv
    limit: 10
    window: 1m
`
	errDown := errors.New("store down")
	for _, a := range adapters {
		e := funcEngine(t, policies, func(*policy.Policy, context.Context, edgelimit.Request) (edgelimit.Decision, error) {
			return edgelimit.Decision{}, errDown
		})
		run := a.build(t, e, nil, nil)
		r := run(call{Method: "GET", Path: "/closed", IP: "203.0.113.7"})
		if r.Status != 503 || r.Ran || r.Header.Get("Content-Type") != "application/problem+json" || r.Err != nil {
			t.Errorf("%s: fail-closed: %d ran=%v %q err=%v; want a 503 problem", a.name, r.Status, r.Ran, r.Header.Get("Content-Type"), r.Err)
		}
		if strings.Contains(r.Body, "store down") {
			t.Errorf("%s: 503 body echoes the private cause: %s", a.name, r.Body)
		}
		r = run(call{Method: "GET", Path: "/open", IP: "203.0.113.7"})
		if r.Status != 200 || !r.Ran || r.Header.Get("RateLimit") != `"open";r=10;t=60` {
			t.Errorf("%s: fail-open: %d ran=%v RateLimit %q; want 200 with the full quota", a.name, r.Status, r.Ran, r.Header.Get("RateLimit"))
		}
	}
}

// sameAsEncodingJSON reports whether body is byte for byte what
// encoding/json writes for the Problem it decodes to.
func sameAsEncodingJSON(t *testing.T, body []byte) {
	t.Helper()
	var p limitertest.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	want, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, want) {
		t.Errorf("body\n %s\nwant what encoding/json writes\n %s", body, want)
	}
}

// claimPolicy is a policy file keyed by a claim with the given name.
func claimPolicy(name string) string {
	q, _ := json.Marshal("claim:" + name) // a JSON string is a YAML double-quoted string
	return `
version: 1
policies:
  - name: a
    routes: ["ANY /*"]
    key: ` + string(q) + `
    strategy: durable
    limit: 1
    window: 1m
  - name: b-2
    routes: ["ANY /*"]
    key: global
    strategy: durable
    limit: 1
    window: 1h
`
}

// TestProblemBodies: the hand-written problem bodies (400, 429 with one
// and several violated policies, 503) are what encoding/json would write.
func TestProblemBodies(t *testing.T) {
	ctx := context.Background()
	withClaim := &edgelimit.Input{Method: "GET", Path: "/x", SourceIP: "203.0.113.7",
		Claims: limitertest.Headers{"sub": "u", `<&>"\ é` + "\u2028": "v"}}
	for _, name := range []string{"sub", `<&>"\ é` + "\u2028", "\x01\t\n", "日本語", strings.Repeat("&", 128)} {
		e, _ := newEngine(t, claimPolicy(name))
		// 400: no such claim (named, quoted, in the detail).
		v := e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/x", SourceIP: "203.0.113.7"})
		if v.Status != 400 {
			t.Fatalf("claim %q: status %d, want 400", name, v.Status)
		}
		sameAsEncodingJSON(t, v.Body)
		if name == "sub" || name == `<&>"\ é`+"\u2028" {
			if v := e.Decide(ctx, withClaim); !v.Allowed {
				t.Fatalf("claim %q: first request denied: %s", name, v.Body)
			}
			v := e.Decide(ctx, withClaim) // both policies over their limit
			if v.Status != 429 || !strings.Contains(string(v.Body), `"violated-policies":["a","b-2"]`) {
				t.Fatalf("claim %q: %d %s, want 429 violating a and b-2", name, v.Status, v.Body)
			}
			sameAsEncodingJSON(t, v.Body)
		}
	}
	// 400 naming a header with characters encoding/json escapes.
	e, _ := newEngine(t, strings.Replace(testPolicies, "key: header:X-Api-Key", "key: header:X-Api&Key", 1))
	v := e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/paid/x", SourceIP: "203.0.113.7"})
	if v.Status != 400 || !strings.Contains(string(v.Body), `\u0026`) {
		t.Errorf("header with &: %d %s", v.Status, v.Body)
	}
	sameAsEncodingJSON(t, v.Body)
	// 429, one policy.
	e, _ = newEngine(t, testPolicies)
	for range 4 {
		v = e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/paid/x", Header: limitertest.Headers{"x-api-key": "k"}})
	}
	if v.Status != 429 {
		t.Fatalf("status %d, want 429", v.Status)
	}
	sameAsEncodingJSON(t, v.Body)
	// 503.
	e = funcEngine(t, onePolicy, func(*policy.Policy, context.Context, edgelimit.Request) (edgelimit.Decision, error) {
		return edgelimit.Decision{}, errors.New("down")
	})
	v = e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/x", SourceIP: "203.0.113.7"})
	if v.Status != 503 {
		t.Fatalf("status %d, want 503", v.Status)
	}
	sameAsEncodingJSON(t, v.Body)
}

// FuzzProblemBody: whatever a claim is called, the 400 that names it is
// valid JSON, exactly as encoding/json writes it.
func FuzzProblemBody(f *testing.F) {
	for _, s := range []string{"sub", `<&>"\`, "é\u2028\u2029", "\x00\x1f\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" || len(name) > 128 || strings.ContainsAny(name, "\x00") {
			return
		}
		pf, err := policy.Parse("f.yaml", []byte(claimPolicy(name)))
		if err != nil {
			return // not a name the policy file accepts
		}
		e, err := edgelimit.New(edgelimit.Config{Policies: pf, HashSecret: testSecret, Logger: discardLogger,
			Limiters: func(*policy.Policy) (edgelimit.Limiter, error) {
				return limitertest.LimiterFunc(func(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
					return edgelimit.Decision{Allowed: true}, nil
				}), nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		v := e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/x"})
		if v.Status != 400 {
			t.Fatalf("status %d, want 400", v.Status)
		}
		sameAsEncodingJSON(t, v.Body)
	})
}

// Regression (issue 10, item 1), through every adapter: no spelling of a
// path escapes its route's policies.
func TestPathSpellings(t *testing.T) {
	const policies = `
version: 1
policies:
  - {name: contact, routes: ["POST /contact"], key: ip, strategy: durable, limit: 3, window: 1m}
`
	spellings := []string{"/contact/", "//contact", "/contact//", "/./contact", "/x/../contact", "/%63ontact", "/contact%2F", "/contact"}
	for _, a := range adapters {
		e, _ := newEngine(t, policies)
		run := a.build(t, e, nil, nil)
		ok := 0
		for _, p := range spellings {
			r := run(call{Method: "POST", Path: p, IP: "203.0.113.7"})
			switch r.Status {
			case 200:
				ok++
			case 429:
			default:
				t.Errorf("%s: POST %s: status %d, want 200 or 429", a.name, p, r.Status)
			}
		}
		if ok != 3 {
			t.Errorf("%s: %d of %d spellings of /contact admitted, want the limit, 3", a.name, ok, len(spellings))
		}
	}
}

// The route the gateway matched guards the request too: an HTTP API
// routeKey and a REST API resource.
func TestGatewayRoute(t *testing.T) {
	const policies = `
version: 1
policies:
  - {name: paid, routes: ["GET /paid/*"], key: ip, strategy: durable, limit: 1, window: 1m}
`
	for _, a := range adapters {
		if a.name != "HTTPAPI" && a.name != "RESTAPI" {
			continue
		}
		e, _ := newEngine(t, policies)
		run := a.build(t, e, nil, nil)
		first := run(call{Method: "GET", Path: "/v1/report", IP: "203.0.113.7", Route: "/paid/{resource}"})
		second := run(call{Method: "GET", Path: "/v1/report", IP: "203.0.113.7", Route: "/paid/{resource}"})
		if first.Status != 200 || second.Status != 429 {
			t.Errorf("%s: statuses %d, %d; want 200 then 429 (the gateway's route /paid/{resource} is limited)", a.name, first.Status, second.Status)
		}
		if r := run(call{Method: "GET", Path: "/v1/report", IP: "203.0.113.7"}); r.Status != 200 || r.Header.Get("RateLimit") != "" {
			t.Errorf("%s: without a route: %d %v; want unguarded", a.name, r.Status, r.Header)
		}
	}
}
