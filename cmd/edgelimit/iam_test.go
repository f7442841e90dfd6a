package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/setup"
)

// callRecorder is a proxy in front of a DynamoDB-API server that records
// each call: its action (X-Amz-Target) and the kinds of item it names (the
// part of each pk before its first #: fw, grant, ovr, kv).
type callRecorder struct {
	mu    sync.Mutex
	calls map[string]map[string]bool // action -> item kinds
}

func newCallRecorder(t *testing.T, target string) (*callRecorder, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &callRecorder{calls: map[string]map[string]bool{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		_, action, _ := strings.Cut(req.Header.Get("X-Amz-Target"), ".")
		var doc any
		_ = json.Unmarshal(body, &doc)
		r.record(action, pks(doc))
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *callRecorder) record(action string, pks []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls[action] == nil {
		r.calls[action] = map[string]bool{}
	}
	for _, pk := range pks {
		kind, _, _ := strings.Cut(pk, "#")
		r.calls[action][kind+"#"] = true
	}
}

// pks returns every {"pk": {"S": value}} of a request body.
func pks(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if m, ok := x.(map[string]any); ok && k == "pk" {
				s, _ := m["S"].(string)
				out = append(out, s)
				continue
			}
			out = append(out, pks(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, pks(x)...)
		}
	}
	return out
}

// take returns what was recorded since the last take, as the table
// writes it: "`GetItem` (fw#, ovr#), `UpdateItem` (grant#)".
func (r *callRecorder) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var cells []string
	for action, kinds := range r.calls {
		cell := "`" + action + "`"
		if len(kinds) > 0 {
			ks := make([]string, 0, len(kinds))
			for k := range kinds {
				ks = append(ks, k)
			}
			slices.Sort(ks)
			cell += " (" + strings.Join(ks, ", ") + ")"
		}
		cells = append(cells, cell)
	}
	slices.Sort(cells)
	r.calls = map[string]map[string]bool{}
	return strings.Join(cells, ", ")
}

// iamPolicies are the kinds of policy whose calls docs/operations.md
// lists, each with overrides: true (a policy an operator manages) and,
// but for inflight, which cannot have one, a ban. The durable one's quota
// is spent by one request, so that usage also asks its grants, as it does
// for a customer at the limit.
const iamPolicies = `version: 1
policies:
  - {name: quota, routes: ["GET /q"], key: header:X-Api-Key, strategy: durable, limit: 1, window: 24h, store_timeout: 5s, overrides: true, ban: {after: 3, for: 15m}}
  - {name: sharded, routes: ["GET /s"], key: global, strategy: durable, limit: 100, window: 24h, shards: 4, store_timeout: 5s, overrides: true, ban: {after: 3, for: 15m}}
  - {name: soft, routes: ["GET /k"], key: header:X-Api-Key, strategy: kv, limit: 100, window: 1m, store_timeout: 5s, overrides: true, ban: {after: 3, for: 15m}}
  - {name: jobs, routes: ["GET /j"], key: header:X-Api-Key, strategy: inflight, limit: 2, window: 1m, store_timeout: 5s, overrides: true}
`

// TestOperatorIAMTable runs every operator command through a proxy that
// records the DynamoDB calls each makes, and compares them with the table
// of IAM actions in docs/operations.md, so that a role built from the
// table is allowed what the commands call.
//
// Regression: the table said kv `grant` was one UpdateItem, but it also
// reads the key's override (a consistent GetItem of ovr#...): a role built
// from it got AccessDeniedException.
func TestOperatorIAMTable(t *testing.T) {
	quotaEnv(t)
	servers := ddbtest.Servers(t)
	rec, endpoint := newCallRecorder(t, servers[0].Endpoint)
	t.Setenv(setup.EnvEndpoint, endpoint)
	t.Setenv(setup.EnvPolicyFile, writePolicies(t, iamPolicies))
	t.Setenv("AWS_REGION", "us-east-1")

	// serve spends on each key first, so that the commands find state to
	// read and reset, as an operator's do.
	url := startServe(t, "--store", "dynamodb", "--create-table")
	rec.take()
	got := map[string][]string{} // row -> cells by column
	run := func(row string, args ...string) string {
		t.Helper()
		mustCLI(t, args...)
		return rec.take()
	}
	got["`edgelimit create-table`"] = []string{run("", "create-table", "--table", fmt.Sprintf("iam-%d", time.Now().UnixNano()))}
	columns := []struct {
		policy, path, key string
		regions           string // EDGELIMIT_KV_REGIONS
	}{{"quota", "/q", "key-1", ""}, {"sharded", "/s", "", ""}, {"soft", "/k", "key-1", ""}, {"soft", "/k", "key-2", "us-east-1,eu-west-1"}, {"jobs", "/j", "key-1", ""}}
	commands := []struct {
		row  string
		args []string
	}{
		{"`edgelimit usage`", []string{"usage"}},
		{"`edgelimit reset`", []string{"reset"}},
		{"`edgelimit grant`", []string{"grant", "-", "-", "5"}},
		{"`edgelimit override set`", []string{"override", "set", "--limit", "7"}},
		{"`edgelimit override get`", []string{"override", "get"}},
		{"`edgelimit override delete`", []string{"override", "delete"}},
		{"`edgelimit ban list`", []string{"ban", "list"}},
		{"`edgelimit ban lift`", []string{"ban", "lift"}},
	}
	for _, col := range columns {
		t.Setenv(setup.EnvKVRegions, col.regions)
		key := col.key
		if key == "" {
			key = "all" // a global policy's key is ignored
		}
		{
			base := url
			if col.regions != "" {
				base = startServe(t, "--store", "dynamodb", "--kv-regions", col.regions)
			}
			req, _ := http.NewRequest(http.MethodGet, base+col.path, nil)
			req.Header.Set("X-Api-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s: %d", col.path, resp.StatusCode)
			}
			rec.take()
		}
		for _, cmd := range commands {
			args := slices.Clone(cmd.args)
			if i := slices.Index(args, "-"); i >= 0 {
				args[i], args[i+1] = col.policy, key
			} else {
				args = append(args, col.policy, key)
			}
			if col.policy == "jobs" && (args[0] == "reset" || args[0] == "grant" || args[0] == "ban") {
				// An inflight policy has nothing to reset or grant, and no ban.
				if code, _, _ := cli(args...); code != 1 {
					t.Errorf("%s on an inflight policy: exit %d, want 1", cmd.row, code)
				}
				rec.take()
				got[cmd.row] = append(got[cmd.row], "—")
				continue
			}
			got[cmd.row] = append(got[cmd.row], run(cmd.row, args...))
		}
	}

	want := iamTable(t)
	for row, cells := range got {
		w, ok := want[row]
		if !ok {
			t.Errorf("docs/operations.md's IAM table has no row %s; the command calls %q", row, cells)
			continue
		}
		for i, cell := range cells {
			if i >= len(w) || normalizeCell(w[i]) != cell {
				var shown string
				if i < len(w) {
					shown = w[i]
				}
				t.Errorf("%s, column %d: the table says %q, the command called %s", row, i+1, shown, cell)
			}
		}
	}
	if t.Failed() {
		var b strings.Builder
		for _, cmd := range append([]struct {
			row  string
			args []string
		}{{"`edgelimit create-table`", nil}}, commands...) {
			fmt.Fprintf(&b, "| %s | %s |\n", cmd.row, strings.Join(got[cmd.row], " | "))
		}
		t.Logf("the rows as the commands call them:\n%s", b.String())
	}
}

var cellNote = regexp.MustCompile(`;.*$`)

// normalizeCell drops what a cell says after a semicolon (a note).
func normalizeCell(s string) string { return strings.TrimSpace(cellNote.ReplaceAllString(s, "")) }

// iamTable reads the table under docs/operations.md's "## IAM" heading:
// each row's command and its cells.
func iamTable(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testDir, "..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "\n## IAM")
	if i < 0 {
		t.Fatal(`docs/operations.md has no "## IAM" section`)
	}
	rows := map[string][]string{}
	inTable := false
	for _, line := range strings.Split(doc[i+1:], "\n")[1:] {
		switch {
		case strings.HasPrefix(line, "## "):
			return rows
		case strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			if !inTable || strings.HasPrefix(cells[0], "---") {
				inTable = true // the header, then the separator
				continue
			}
			rows[cells[0]] = cells[1:]
		case inTable && rows != nil && len(rows) > 0:
			return rows
		}
	}
	return rows
}
