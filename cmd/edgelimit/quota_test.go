package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/setup"
)

// The operator's commands (usage, reset, grant, override) against the table
// that `edgelimit serve --store dynamodb` decides with, hashing the key with
// the same EDGELIMIT_HASH_KEY.
//
// serve is a real process's engine with the real clock: what the operator
// changes reaches it within the policy's override_staleness (1s here) and
// its deny cache's DenyCacheMaxAge (1s). The test waits those out with
// afterStaleness, which sleeps until a second has passed since the last
// request that could have filled either cache: the bound is the engine's,
// not the machine's speed, so a slow machine makes the test slower, never
// red.

const quotaPolicies = `version: 1
policies:
  - name: api-daily
    routes: ["GET /api/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 100
    window: 24h
    on_store_error: deny
    store_timeout: 5s
    tiers:
      by: header:X-Plan
      default: free
      levels: {free: {limit: 100}, pro: {limit: 10000}}
    overrides: true
    override_staleness: 1s
  - {name: plain, routes: ["GET /plain"], key: header:X-Api-Key, strategy: durable, limit: 5, window: 1h, store_timeout: 5s}
`

// quotaEnv points the commands and serve at a fresh table of the first
// server the runner started, with a hash key of the test's own.
func quotaEnv(t *testing.T) {
	t.Helper()
	servers := ddbtest.Servers(t)
	t.Setenv(setup.EnvEndpoint, servers[0].Endpoint)
	t.Setenv(setup.EnvTable, fmt.Sprintf("quota-%d", time.Now().UnixNano()))
	t.Setenv(setup.EnvHashKey, base64.StdEncoding.EncodeToString([]byte(strings.Repeat("operator-hash-key-", 2))))
}

// cli runs the edgelimit command line in-process and returns its exit code
// and what it wrote.
func cli(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := cli(args...)
	if code != 0 {
		t.Fatalf("edgelimit %s: exit %d: %s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

type apiClient struct {
	t    *testing.T
	url  string
	last time.Time // when the latest request was answered
}

// get sends one request and returns its status and RateLimit fields.
func (c *apiClient) get(path, key, plan string) (status int, policy, limit string) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.url+path, nil)
	req.Header.Set("X-Api-Key", key)
	if plan != "" {
		req.Header.Set("X-Plan", plan)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Once the answer is in, serve has decided: whatever the request put
	// in its caches, it put there before now. (Taken when the request was
	// sent, a loaded machine that made serve decide more than the slack
	// later left afterStaleness short: a stale denial after a grant.)
	c.last = time.Now()
	return resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit")
}

// admitted sends requests until one is denied and returns how many passed.
func (c *apiClient) admitted(path, key string, most int) int {
	c.t.Helper()
	for i := range most + 1 {
		status, _, _ := c.get(path, key, "")
		switch status {
		case 200:
		case 429:
			return i
		default:
			c.t.Fatalf("request %d: status %d", i+1, status)
		}
	}
	c.t.Fatalf("more than %d admitted", most)
	return 0
}

// afterStaleness waits until serve's caches (override_staleness and the
// deny cache's DenyCacheMaxAge, both 1s) have forgotten everything the
// requests so far taught them.
func (c *apiClient) afterStaleness() {
	time.Sleep(time.Until(c.last.Add(time.Second + 10*time.Millisecond)))
}

type usageJSON struct {
	Policy    string         `json:"policy"`
	Tier      string         `json:"tier"`
	Limit     int64          `json:"limit"`
	Window    int64          `json:"window_seconds"`
	Remaining int64          `json:"remaining"`
	Reset     int64          `json:"reset_seconds"`
	Allowed   bool           `json:"allowed"`
	Override  map[string]any `json:"override"`
	Quota     int64          `json:"quota_remaining"`
	Grant     *struct {
		Units int64  `json:"units"`
		Until string `json:"until"`
	} `json:"grant"`
}

func usageOf(t *testing.T, args ...string) usageJSON {
	t.Helper()
	out := mustCLI(t, append([]string{"usage", "--json"}, args...)...)
	var u usageJSON
	if err := json.Unmarshal([]byte(out), &u); err != nil {
		t.Fatalf("usage --json printed %q: %v", out, err)
	}
	return u
}

func TestQuotaCommandsAgainstServe(t *testing.T) {
	quotaEnv(t)
	awayFromDayBoundary(t)
	// The policy file as the functions name it; serve and the commands
	// read it from there.
	t.Setenv(setup.EnvPolicyFile, writePolicies(t, quotaPolicies))
	c := &apiClient{t: t, url: startServe(t, "--store", "dynamodb", "--create-table")}

	// What serve spent, usage reads back: the same key, hashed the same way.
	for i := range 4 {
		if status, rp, rl := c.get("/api/report", "key-acme", ""); status != 200 || rp != `"api-daily";q=100;w=86400` || !strings.HasPrefix(rl, fmt.Sprintf(`"api-daily";r=%d;t=`, 99-i)) {
			t.Fatalf("request %d: %d, %s, %s", i+1, status, rp, rl)
		}
	}
	if status, rp, _ := c.get("/api/report", "key-bigco", "pro"); status != 200 || rp != `"api-daily";q=10000;w=86400` {
		t.Errorf("a pro customer: %d, RateLimit-Policy %s, want q=10000", status, rp)
	}
	u := usageOf(t, "api-daily", "key-acme")
	if u.Limit != 100 || u.Remaining != 96 || u.Window != 86400 || u.Tier != "free" || !u.Allowed || u.Override != nil || u.Reset <= 0 || u.Reset > 86400 {
		t.Errorf("usage after 4 requests = %+v, want limit 100, remaining 96, the free tier, no override", u)
	}
	if u := usageOf(t, "--tier", "pro", "api-daily", "key-acme"); u.Limit != 10000 || u.Remaining != 9996 || u.Tier != "pro" {
		t.Errorf("usage --tier pro = %+v, want limit 10000, remaining 9996", u)
	}
	table := mustCLI(t, "usage", "api-daily", "key-acme")
	if !strings.Contains(table, "POLICY") || !strings.Contains(strings.Join(strings.Fields(table), " "), "api-daily free 100 1d 96") {
		t.Errorf("usage's table:\n%s", table)
	}

	// An override lowers the key's limit: serve applies it within its
	// staleness; the 4 spent stay spent.
	out := mustCLI(t, "override", "set", "--limit", "6", "api-daily", "key-acme")
	if want := "policy api-daily: override limit 6 set until removed; every instance applies it within the policy's override_staleness (1s)\n"; out != want {
		t.Errorf("override set printed %q, want %q", out, want)
	}
	c.afterStaleness()
	if _, rp, _ := c.get("/api/report", "key-acme", ""); rp != `"api-daily";q=6;w=86400` {
		t.Errorf("after the override: RateLimit-Policy %s, want q=6", rp)
	}
	if got := c.admitted("/api/report", "key-acme", 6); got != 1 {
		t.Errorf("under the override of 6 with 5 spent: %d more admitted, want 1", got)
	}
	if u := usageOf(t, "api-daily", "key-acme"); u.Limit != 6 || u.Remaining != 0 || u.Allowed || u.Override["limit"] != float64(6) {
		t.Errorf("usage under the override = %+v, want limit 6, nothing left, the override shown", u)
	}

	// A grant: 2 units beyond the quota, which serve honours within its
	// deny cache's second.
	out = mustCLI(t, "grant", "api-daily", "key-acme", "2", "--for", "1h")
	if !strings.HasPrefix(out, "policy api-daily: granted 2 units until ") {
		t.Errorf("grant printed %q", out)
	}
	// usage says what the key can spend now: the grant's 2.
	until := strings.TrimSuffix(strings.TrimPrefix(out, "policy api-daily: granted 2 units until "), "\n")
	if u := usageOf(t, "api-daily", "key-acme"); u.Remaining != 2 || u.Quota != 0 || u.Grant == nil || u.Grant.Units != 2 || u.Grant.Until != until || !u.Allowed {
		t.Errorf("usage with a grant of 2 = %+v (grant %+v), want 2 left, all of the grant's, until %s", u, u.Grant, until)
	}
	if table := strings.Join(strings.Fields(mustCLI(t, "usage", "api-daily", "key-acme")), " "); !strings.Contains(table, " 2 until "+until) {
		t.Errorf("usage's table with a grant:\n%s", table)
	}
	c.afterStaleness()
	if got := c.admitted("/api/report", "key-acme", 3); got != 2 {
		t.Errorf("with a grant of 2: %d admitted, want 2", got)
	}

	// Raised: what was spent of the quota (6) stays spent.
	mustCLI(t, "override", "set", "--limit", "9", "api-daily", "key-acme")
	c.afterStaleness()
	if got := c.admitted("/api/report", "key-acme", 9); got != 3 {
		t.Errorf("raised to 9 with 6 spent: %d admitted, want 3", got)
	}

	// Reset: the quota is whole again, on serve within its deny cache's
	// second.
	if out := mustCLI(t, "reset", "api-daily", "key-acme"); out != "policy api-daily: the key's usage is reset\n" {
		t.Errorf("reset printed %q", out)
	}
	if u := usageOf(t, "api-daily", "key-acme"); u.Remaining != 9 || u.Limit != 9 {
		t.Errorf("usage after the reset = %+v, want 9 of 9", u)
	}
	c.afterStaleness()
	if got := c.admitted("/api/report", "key-acme", 9); got != 9 {
		t.Errorf("after the reset: %d admitted, want 9", got)
	}

	// override get and delete; the policy's limits come back.
	if out := mustCLI(t, "override", "get", "api-daily", "key-acme"); out != "policy api-daily: override limit 9\n" {
		t.Errorf("override get printed %q", out)
	}
	if out := mustCLI(t, "override", "get", "--json", "api-daily", "key-acme"); out != `{"override":{"limit":9},"policy":"api-daily"}`+"\n" {
		t.Errorf("override get --json printed %q", out)
	}
	mustCLI(t, "override", "delete", "api-daily", "key-acme")
	if u := usageOf(t, "api-daily", "key-acme"); u.Limit != 100 || u.Remaining != 91 || u.Override != nil {
		t.Errorf("usage after the override's removal = %+v, want 91 of 100", u)
	}
}

// The commands refuse clearly, with the exact words an operator reads.
func TestQuotaCommandErrors(t *testing.T) {
	quotaEnv(t)
	signed := writePolicies(t, quotaPolicies+`  - {name: tts, routes: ["POST /tts"], key: ip, strategy: signed, limit: 10, window: 1m}
`)
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		stderr string
		code   int // 0: 1, a failure
	}{
		{"no hash key", map[string]string{setup.EnvHashKey: ""}, []string{"usage", "--policies", signed, "api-daily", "k"},
			"edgelimit usage: EDGELIMIT_HASH_KEY is not set: it must be the functions' hash key (the hash_key of their secret), or the key cannot be found\n", 0},
		{"unknown policy", nil, []string{"reset", "--policies", signed, "api-dialy", "k"},
			"edgelimit reset: " + signed + ` has no policy "api-dialy" (it has api-daily, plain, tts)` + "\n", 0},
		{"signed policy", nil, []string{"grant", "--policies", signed, "tts", "203.0.113.9", "5"},
			`edgelimit grant: policy "tts" is signed: it keeps no count on the server (the client carries its window token), so there is no usage to read, reset or grant, and no override to set` + "\n", 0},
		{"override without overrides: true", nil, []string{"override", "set", "--policies", signed, "--limit", "9", "plain", "k"},
			"edgelimit override: policy \"plain\" does not read overrides; add `overrides: true` to it\n", 0},
		// Regression: the message named a Go field (Policy.Overrides).
		{"grant without overrides: true", nil, []string{"grant", "--policies", signed, "plain", "k", "5"},
			"edgelimit grant: policy \"plain\" takes no grants; add `overrides: true` to it (a policy an operator manages at run time)\n", 0},
		{"no units", nil, []string{"grant", "--policies", signed, "api-daily", "k", "0"},
			"edgelimit grant: UNITS \"0\" is not a whole number of at least 1\nRun 'edgelimit grant -h' for its usage.\n", 2},
		// Regression: a negative number was read as a flag (flag provided
		// but not defined: -5).
		{"negative units", nil, []string{"grant", "--policies", signed, "api-daily", "k", "-5"},
			"edgelimit grant: UNITS \"-5\" is not a whole number of at least 1\nRun 'edgelimit grant -h' for its usage.\n", 2},
		{"until and for", nil, []string{"grant", "--policies", signed, "--for", "1h", "--until", "2030-01-01T00:00:00Z", "api-daily", "k", "5"},
			"edgelimit grant: give --until or --for, not both\nRun 'edgelimit grant -h' for its usage.\n", 2},
		// Regression: it said "to remove one, DeleteOverride", a Go method.
		{"override set without a limit", nil, []string{"override", "set", "--policies", signed, "api-daily", "k"},
			"edgelimit override set: say what to set: --limit, --window or --burst (--limit 0 blocks the key); `edgelimit override delete` removes an override\nRun 'edgelimit override -h' for its usage.\n", 2},
		{"override get with a limit", nil, []string{"override", "get", "--policies", signed, "api-daily", "k", "--limit", "3"},
			"edgelimit override get: --limit is for override set\nRun 'edgelimit override -h' for its usage.\n", 2},
		{"an unknown tier", nil, []string{"usage", "--policies", signed, "--tier", "gold", "api-daily", "k"},
			"edgelimit usage: policy \"api-daily\" has no tier \"gold\" (it has free, pro)\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			want := tc.code
			if want == 0 {
				want = 1
			}
			code, out, errs := cli(tc.args...)
			if code != want || out != "" || errs != tc.stderr {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit %d and:\n%s", code, out, errs, want, tc.stderr)
			}
		})
	}
	if _, err := os.Stat(signed); err != nil {
		t.Fatal(err)
	}
}
