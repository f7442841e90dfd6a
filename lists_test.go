package edgelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

const listsFile = `version: 1
lists:
  - name: abusers
    action: deny
    values: [203.0.113.0/24, "2001:db8:bad::/48", 198.51.100.7]
  - name: monitoring
    action: allow
    values: [192.0.2.0/24, 203.0.113.9]
  - name: internal-keys
    action: allow
    match: header:X-Api-Key
    values: [job-1, job-2]
  - name: revoked
    action: deny
    match: claim:sub
    routes: ["GET /paid/*"]
    values: [user-9]
policies:
  - {name: per-ip, routes: ["GET /*"], key: ip, strategy: durable, limit: 1, window: 1m}
`

func TestListsDenyAllowAndScope(t *testing.T) {
	fx := newFixture(t, listsFile, nil)
	ctx := context.Background()
	decide := func(ip string, hdr map[string]string, claims map[string]string, path string) *edgelimit.Verdict {
		in := &edgelimit.Input{Method: "GET", Path: path, SourceIP: ip, Header: limitertest.Headers(hdr)}
		if claims != nil {
			in.Claims = limitertest.Headers(claims)
		}
		return fx.e.Decide(ctx, in)
	}
	for _, ip := range []string{"203.0.113.1", "203.0.113.255", "2001:db8:bad:ffff::1", "198.51.100.7", "::ffff:203.0.113.4"} {
		fx.events = nil
		v := decide(ip, nil, nil, "/a")
		if v.Allowed || v.Status != 403 {
			t.Fatalf("%s: allowed=%v status=%d, want 403", ip, v.Allowed, v.Status)
		}
		p := problem(t, v)
		if p.Status != 403 || p.Title != "Forbidden" || header(v, "Content-Type") != "application/problem+json" {
			t.Errorf("%s: problem %+v", ip, p)
		}
		if strings.Contains(string(v.Body), "abusers") || strings.Contains(string(v.Body), "203.0.113") || strings.Contains(string(v.Body), "2001") {
			t.Errorf("%s: the body names the list or its entry: %s", ip, v.Body)
		}
		if header(v, "RateLimit") != "" || header(v, "Retry-After") != "" {
			t.Errorf("%s: a deny-listed request carries rate-limit fields: %v", ip, v.Header())
		}
		if len(fx.events) != 1 || fx.events[0].Reason != "deny-list" || fx.events[0].Policy != "abusers" || fx.events[0].Allowed {
			t.Errorf("%s: events %+v, want one deny-list event", ip, fx.events)
		}
	}
	if n := len(fx.limiters["per-ip"].keys); n != 0 {
		t.Fatalf("a listed request reached the limiter %d times", n)
	}

	// An allow-listed address is never limited, and the client cannot tell.
	for i := 0; i < 5; i++ {
		fx.events = nil
		v := decide("192.0.2.44", nil, nil, "/a")
		if !v.Allowed || len(v.Header()) != 0 || len(v.Decisions) != 0 {
			t.Fatalf("allow-listed request %d: %+v", i, v)
		}
		if len(fx.events) != 1 || fx.events[0].Reason != "allow-list" || !fx.events[0].Allowed {
			t.Fatalf("events %+v, want one allow-list event", fx.events)
		}
	}
	// Deny wins over allow: 203.0.113.9 is on both.
	if v := decide("203.0.113.9", nil, nil, "/a"); v.Status != 403 {
		t.Errorf("an address on a deny and an allow list: status %d, want 403", v.Status)
	}
	// A header list: exact value, trimmed, case-sensitive.
	for _, key := range []string{"job-1", " job-2 "} {
		if v := decide("10.0.0.1", map[string]string{"X-Api-Key": key}, nil, "/a"); !v.Allowed || len(v.Header()) != 0 {
			t.Errorf("key %q: %+v, want unlimited", key, v)
		}
	}
	if v := decide("10.0.0.1", map[string]string{"X-Api-Key": "JOB-1"}, nil, "/a"); !v.Allowed || header(v, "RateLimit") == "" {
		t.Errorf("JOB-1 is not on the list, yet %+v", v)
	}
	// A claim list scoped to a route guards only that route.
	if v := decide("10.0.0.2", nil, map[string]string{"sub": "user-9"}, "/paid/x"); v.Status != 403 {
		t.Errorf("revoked subject on /paid/x: status %d, want 403", v.Status)
	}
	if v := decide("10.0.0.3", nil, map[string]string{"sub": "user-9"}, "/free"); !v.Allowed || header(v, "RateLimit") == "" {
		t.Errorf("revoked subject off its route: %+v, want limited as usual", v)
	}
	// Spellings of the path are canonical before lists match.
	if v := decide("10.0.0.4", nil, map[string]string{"sub": "user-9"}, "/paid/./x/"); v.Status != 403 {
		t.Errorf("/paid/./x/: status %d, want 403", v.Status)
	}
	if v := decide("10.0.0.5", nil, map[string]string{"sub": "user-9"}, "/%70aid/x"); v.Status != 403 {
		t.Errorf("/%%70aid/x: status %d, want 403", v.Status)
	}
}

func TestListsRouteTemplateAndProxies(t *testing.T) {
	fx := newFixture(t, `version: 1
lists:
  - {name: office, action: deny, routes: ["GET /items/*"], trusted_proxies: 1, values: [192.0.2.0/24]}
policies:
  - {name: p, routes: ["GET /*"], key: ip, strategy: durable, limit: 100, window: 1m}
`, nil)
	ctx := context.Background()
	// The gateway's route template guards the request too: the path was
	// rewritten by a stage mapping, the template was not.
	v := fx.e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/v2/items/7", Route: "GET /items/{id}", SourceIP: "198.51.100.1",
		Header: limitertest.Headers(map[string]string{"X-Forwarded-For": "192.0.2.5, 198.51.100.1"})})
	if v.Status != 403 {
		t.Errorf("client 192.0.2.5 behind one proxy: status %d, want 403", v.Status)
	}
	// Without the header, the source address is the client.
	v = fx.e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/items/7", Route: "GET /items/{id}", SourceIP: "198.51.100.1"})
	if !v.Allowed {
		t.Errorf("198.51.100.1 is not listed, yet %d", v.Status)
	}
}

func TestListsFromFileAndEnv(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("# blocked ranges\n\n")
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&b, "10.%d.%d.0/24  # range %d\n", i/256, i%256, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "blocked.txt"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(path, []byte(`version: 1
lists:
  - {name: blocked, action: deny, file: blocked.txt}
  - {name: partners, action: allow, match: header:X-Partner, env: PARTNERS}
policies:
  - {name: p, routes: ["GET /*"], key: ip, strategy: durable, limit: 1, window: 1m}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	pf, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := edgelimit.New(edgelimit.Config{
		Policies: pf, HashSecret: []byte(strings.Repeat("k", 32)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return &counter{p: p, n: map[string]int64{}}, nil
		},
		Getenv: func(k string) string {
			if k == "PARTNERS" {
				return "acme, globex\ninitech"
			}
			return ""
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for ip, want := range map[string]int{"10.0.0.1": 403, "10.11.183.200": 403, "10.11.184.1": 0, "11.0.0.1": 0} {
		v := e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/x", SourceIP: ip})
		if v.Status != want {
			t.Errorf("%s: status %d, want %d", ip, v.Status, want)
		}
	}
	for _, partner := range []string{"acme", "globex", "initech"} {
		for i := 0; i < 3; i++ {
			v := e.Decide(ctx, &edgelimit.Input{Method: "GET", Path: "/x", SourceIP: "12.0.0.1", Header: limitertest.Headers(map[string]string{"X-Partner": partner})})
			if !v.Allowed || len(v.Header()) != 0 {
				t.Fatalf("partner %s request %d: %+v", partner, i, v)
			}
		}
	}
}

func TestListsBuildErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("10.0.0.0/8\nnot-an-address\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		list   string
		getenv func(string) string
		want   string
	}{
		"missing file":   {"{name: l, action: deny, file: " + filepath.Join(dir, "none.txt") + "}", nil, "no such file"},
		"bad file value": {"{name: l, action: deny, file: " + bad + "}", nil, `bad.txt:2: list "l": "not-an-address" is not an address`},
		"bad env value":  {"{name: l, action: deny, env: BLOCKED}", func(string) string { return "10.0.0.0/33" }, `t.yaml:3: list "l": environment variable BLOCKED, value 1: "10.0.0.0/33" is not a CIDR`},
	} {
		t.Run(name, func(t *testing.T) {
			pf, err := policy.Parse("t.yaml", []byte("version: 1\nlists:\n  - "+tc.list+"\npolicies:\n  - {name: p, routes: [\"GET /*\"], key: ip, strategy: durable, limit: 1, window: 1m}\n"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = edgelimit.New(edgelimit.Config{Policies: pf, Getenv: tc.getenv,
				Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) { return &counter{p: p}, nil }})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `list "l"`) {
				t.Fatalf("error %v, want one naming the list and %q", err, tc.want)
			}
		})
	}
}

func FuzzParseLists(f *testing.F) {
	f.Add("- {name: a, action: deny, values: [10.0.0.0/8, \"::1\"]}")
	f.Add("- {name: a, action: allow, match: header:X-K, routes: [\"GET /x\"], values: k}")
	f.Add("- {name: a, action: deny, trusted_proxies: 2, values: [192.0.2.1]}")
	f.Add("- {name: a, action: deny, env: X}")
	f.Fuzz(func(t *testing.T, lists string) {
		file := "version: 1\nlists:\n" + indent(lists) + "\npolicies:\n  - {name: p, routes: [\"GET /*\"], key: ip, strategy: durable, limit: 1, window: 1m}\n"
		pf, err := policy.Parse("fuzz.yaml", []byte(file))
		if err != nil {
			if !errors.Is(err, policy.ErrBadFile) {
				t.Fatalf("error %v is not ErrBadFile", err)
			}
			return
		}
		// A file that parses builds (env values are empty; files may be
		// missing, which is an error, never a panic) and decides.
		e, err := edgelimit.New(edgelimit.Config{Policies: pf, Getenv: func(string) string { return "" },
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
				return &counter{p: p, n: map[string]int64{}}, nil
			}})
		if err != nil {
			return
		}
		for _, ip := range []string{"10.1.2.3", "::1", "192.0.2.1", "bogus"} {
			v := e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/x", SourceIP: ip, Header: limitertest.Headers(map[string]string{"X-K": "k"})})
			if !v.Allowed && v.Status != 403 && v.Status != 429 && v.Status != 400 {
				t.Fatalf("status %d", v.Status)
			}
		}
	})
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// BenchmarkDenyList10000CIDRs decides requests against a deny list of
// 10,000 CIDRs of both families (none matches, the common case, so every
// list is searched in full) and no policy.
func BenchmarkDenyList10000CIDRs(b *testing.B) {
	var vals strings.Builder
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&vals, "      - 10.%d.%d.0/24\n", i/256%256, i%256)
		fmt.Fprintf(&vals, "      - \"2001:db8:%x::/48\"\n", i)
	}
	pf, err := policy.Parse("b.yaml", []byte("version: 1\nlists:\n  - name: blocked\n    action: deny\n    values:\n"+vals.String()+
		"policies:\n  - {name: p, routes: [\"GET /other\"], key: ip, strategy: durable, limit: 1, window: 1m}\n"))
	if err != nil {
		b.Fatal(err)
	}
	e, err := edgelimit.New(edgelimit.Config{Policies: pf,
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return &counter{p: p, n: map[string]int64{}}, nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	ins := []*edgelimit.Input{
		{Method: "GET", Path: "/x", SourceIP: "11.0.0.1"},
		{Method: "GET", Path: "/x", SourceIP: "2001:db9::1"},
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if v := e.Decide(ctx, ins[i&1]); !v.Allowed {
			b.Fatal("denied")
		}
	}
}
