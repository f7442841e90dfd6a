package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/setup"
)

const banPolicies = `version: 1
policies:
  - name: api
    routes: ["GET /api/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 1
    window: 1h
    store_timeout: 5s
    ban: {after: 2, within: 1h, for: 15m, staleness: 1s}
  - {name: soft, routes: ["GET /k"], key: header:X-Api-Key, strategy: kv, limit: 100, window: 1m, store_timeout: 5s, ban: {after: 2, for: 1m}}
  - {name: plain, routes: ["GET /plain"], key: header:X-Api-Key, strategy: durable, limit: 5, window: 1h, store_timeout: 5s}
`

// banGet sends one request of key and returns its status and body.
func banGet(t *testing.T, url, key string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/api/x", nil)
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// banStatus sends one request and reports its status and whether its
// body names a ban.
func banStatus(t *testing.T, url, key string) (int, bool) {
	t.Helper()
	status, body := banGet(t, url, key)
	return status, strings.Contains(string(body), `"ban":{`)
}

// banUntil sends one request of a banned key and returns its 429's
// ban.until.
func banUntil(t *testing.T, url, key string) string {
	t.Helper()
	status, raw := banGet(t, url, key)
	var body struct {
		Ban struct {
			Until string `json:"until"`
		} `json:"ban"`
	}
	if err := json.Unmarshal(raw, &body); err != nil || status != 429 || body.Ban.Until == "" {
		t.Fatalf("a banned key's request: %d, ban.until %q, %v; want a 429 naming its ban", status, body.Ban.Until, err)
	}
	return body.Ban.Until
}

// TestBanCommands: serve bans a key after its denials; `ban list` shows
// the ban serve wrote, `ban lift` lifts it, and serve applies the lift
// within the policy's ban.staleness. Each command makes the DynamoDB calls
// docs/operations.md's IAM table says.
func TestBanCommands(t *testing.T) {
	quotaEnv(t)
	rec, endpoint := newCallRecorder(t, ddbtest.Servers(t)[0].Endpoint)
	t.Setenv(setup.EnvEndpoint, endpoint)
	t.Setenv(setup.EnvPolicyFile, writePolicies(t, banPolicies))
	t.Setenv("AWS_REGION", "us-east-1")
	url := startServe(t, "--store", "dynamodb", "--create-table")
	for i, want := range []struct {
		status int
		ban    bool
	}{{200, false}, {429, false}, {429, true}, {429, true}} {
		if st, ban := banStatus(t, url, "key-1"); st != want.status || ban != want.ban {
			t.Fatalf("request %d: %d (ban %v), want %d (ban %v)", i+1, st, ban, want.status, want.ban)
		}
	}
	bodyUntil := banUntil(t, url, "key-1")
	last := time.Now()
	rec.take()
	out := mustCLI(t, "ban", "list", "api", "key-1")
	if !strings.HasPrefix(out, "policy api: banned until ") || !strings.Contains(out, "(ban 1 of its run)") {
		t.Errorf("ban list: %q", out)
	}
	iam := iamTable(t)
	check := func(row string, col int) {
		t.Helper()
		cells := iam[row]
		if got := rec.take(); len(cells) <= col || normalizeCell(cells[col]) != got {
			t.Errorf("%s, column %d: the IAM table says %q, the command called %s", row, col+1, cells, got)
		}
	}
	check("`edgelimit ban list`", 0)
	var j map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, "ban", "list", "--json", "api", "key-1")), &j); err != nil || j["banned"] != true || j["level"] != float64(1) {
		t.Errorf("ban list --json: %v, %v", j, err)
	}
	// The ban's end, rounded up to its second, is the same instant in the
	// text, in --json and in the 429's ban member.
	textUntil, _, _ := strings.Cut(strings.TrimPrefix(out, "policy api: banned until "), " ")
	if j["until"] != textUntil || j["until"] != bodyUntil {
		t.Errorf("the ban's end: %q in the text, %v in --json, %q in the 429's body; want one instant", textUntil, j["until"], bodyUntil)
	}
	if out := mustCLI(t, "ban", "list", "api", "key-2"); out != "policy api: not banned\n" {
		t.Errorf("ban list of a key never denied: %q", out)
	}
	rec.take()
	if out := mustCLI(t, "ban", "lift", "api", "key-1"); !strings.Contains(out, "within the policy's ban.staleness (1s)") {
		t.Errorf("ban lift: %q", out)
	}
	check("`edgelimit ban lift`", 0)
	mustCLI(t, "ban", "list", "soft", "key-1")
	check("`edgelimit ban list`", 2)
	mustCLI(t, "ban", "lift", "soft", "key-1")
	check("`edgelimit ban lift`", 2)
	time.Sleep(time.Until(last.Add(time.Second + 10*time.Millisecond))) // serve's knowledge of the ban is stale
	if st, ban := banStatus(t, url, "key-1"); st != 429 || ban {
		t.Errorf("after the lift: %d (ban %v), want the limiter's own 429 (the hour's quota is spent)", st, ban)
	}
	if out := mustCLI(t, "ban", "list", "api", "key-1"); !strings.HasPrefix(out, "policy api: not banned; 1 of 2 denials counted since ") {
		t.Errorf("ban list after the lift and one denial: %q", out)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ban"}, 2, "edgelimit ban: say list or lift"},
		{[]string{"ban", "show", "api", "k"}, 2, "say list or lift"},
		{[]string{"ban", "list", "api"}, 2, "edgelimit ban list: want 2 arguments, got 1"},
		{[]string{"ban", "list", "nope", "k"}, 1, `has no policy "nope"`},
		{[]string{"ban", "lift", "plain", "k"}, 1, `policy "plain" has no ban`},
	} {
		code, _, errs := cli(tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("edgelimit %s: exit %d, %q; want %d and %q", strings.Join(tc.args, " "), code, errs, tc.code, tc.want)
		}
		if first, _, _ := strings.Cut(errs, "\n"); tc.code == 1 && strings.TrimSpace(errs) != first {
			t.Errorf("edgelimit %s: error of more than one line: %q", strings.Join(tc.args, " "), errs)
		}
	}
}
