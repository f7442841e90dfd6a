package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/metrics"
)

// startServeLines is startServe that also keeps every line serve writes to
// standard output (the EMF lines of --emf among them).
func startServeLines(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), pw, stderr)
		pw.Close()
	}()
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			stdout.Write(append(sc.Bytes(), '\n'))
			if m := listenRe.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
		close(urlc)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case u, ok := <-urlc:
		if !ok {
			t.Fatalf("serve exited before listening: %s", stderr.String())
		}
		return u, stdout
	case code := <-done:
		t.Fatalf("serve exited with %d: %s", code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start: %s", stderr.String())
	}
	return "", nil
}

func get(t *testing.T, url string, header map[string]string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitLines waits until out holds n EMF lines: serve writes a decision's
// line before it answers, but the pipe to the test is read on its own.
func waitLines(t *testing.T, out *syncBuffer, n int) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := out.String()
		if strings.Count(s, `"_aws"`) >= n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve wrote %d EMF lines, want %d:\n%s", strings.Count(s, `"_aws"`), n, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func runTopOn(t *testing.T, input string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = runTop(context.Background(), args, strings.NewReader(input), &o, &e)
	return code, o.String(), e.String()
}

// TestTopOverServe: the EMF lines of a real `edgelimit serve --emf` on the
// memory store, fed to top, rank each policy's keys by their denials, with
// their admissions; the keys are printed hashed (never raw), and --key
// finds one by hashing it as serve did.
func TestTopOverServe(t *testing.T) {
	t.Setenv("EDGELIMIT_HASH_KEY", "dGhpcyBpcyBhIHRlc3QgaGFzaCBrZXkgb2YgMzIgYnl0ZXMh") // 32 bytes
	url, out := startServeLines(t, "--policies", writePolicies(t, demoPolicies), "--emf")
	alice := map[string]string{"X-Api-Key": "alice-secret-key"}
	bob := map[string]string{"X-Api-Key": "bob-secret-key"}
	var codes []int
	for range 5 {
		codes = append(codes, get(t, url+"/paid/report", alice)) // limit 3: 3 admitted, 2 denied
	}
	codes = append(codes, get(t, url+"/paid/report", bob))
	for range 7 {
		codes = append(codes, get(t, url+"/demo/x", nil)) // limit 5 per address
	}
	want := []int{200, 200, 200, 429, 429, 200, 200, 200, 200, 200, 200, 429, 429}
	if !reflect.DeepEqual(codes, want) {
		t.Fatalf("statuses %v, want %v", codes, want)
	}
	lines := waitLines(t, out, len(want))

	code, stdout, stderr := runTopOn(t, lines, "--json")
	if code != 0 {
		t.Fatalf("top --json: exit %d: %s", code, stderr)
	}
	var got struct {
		Decisions int64    `json:"decisions"`
		Keys      []topRow `json:"keys"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("top --json printed %q: %v", stdout, err)
	}
	if got.Decisions != int64(len(want)) || len(got.Keys) != 3 {
		t.Fatalf("top --json: %+v; want %d decisions, 3 keys", got, len(want))
	}
	counts := func(r topRow) [3]int64 { return [3]int64{r.Denied, r.Allowed, r.ShadowDenied} }
	if k := got.Keys; k[0].Policy != "demo" || counts(k[0]) != [3]int64{2, 5, 0} ||
		k[1].Policy != "paid" || counts(k[1]) != [3]int64{2, 3, 0} || k[2].Policy != "paid" || counts(k[2]) != [3]int64{0, 1, 0} {
		t.Errorf("top --json keys %+v; want demo's address 2 denied 5 allowed, then paid's alice 2/3 and bob 0/1", k)
	}

	code, stdout, _ = runTopOn(t, lines, "--policy", "paid", "-n", "1")
	if code != 0 || strings.Count(stdout, "\n") != 2 || !strings.Contains(stdout, got.Keys[1].KeyHash) {
		t.Errorf("top --policy paid -n 1: exit %d:\n%s\nwant the header and alice's hash %s", code, stdout, got.Keys[1].KeyHash)
	}
	var emf strings.Builder
	for _, l := range strings.SplitAfter(lines, "\n") {
		if strings.Contains(l, `"_aws"`) {
			emf.WriteString(l)
		}
	}
	for _, raw := range []string{"alice-secret-key", "bob-secret-key", "127.0.0.1"} {
		if strings.Contains(emf.String(), raw) {
			t.Errorf("serve's EMF lines carry the raw key %q", raw)
		}
	}

	// Flags after the arguments (a file), and --key to find alice.
	file := filepath.Join(t.TempDir(), "serve.log")
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	var o, e bytes.Buffer
	code = run(context.Background(), []string{"top", file, "--key", "alice-secret-key", "--policies", writePolicies(t, demoPolicies)}, &o, &e)
	if code != 0 || !strings.Contains(o.String(), got.Keys[1].KeyHash) || strings.Contains(o.String(), got.Keys[2].KeyHash) ||
		strings.Contains(o.String(), "alice-secret-key") {
		t.Errorf("top FILE --key alice: exit %d:\n%s%s\nwant alice's row (%s) only, and no raw key", code, o.String(), e.String(), got.Keys[1].KeyHash)
	}
}

// TestServeEMFRequestID: each EMF line of `serve --emf` carries its
// request's requestId, the request_id of the demo echo, as a function's
// lines carry the invocation's on Lambda.
func TestServeEMFRequestID(t *testing.T) {
	url, out := startServeLines(t, "--policies", writePolicies(t, demoPolicies), "--emf")
	var ids []string
	for range 3 {
		resp, err := http.Get(url + "/demo/x")
		if err != nil {
			t.Fatal(err)
		}
		var echo struct {
			RequestID string `json:"request_id"`
		}
		err = json.NewDecoder(resp.Body).Decode(&echo)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || echo.RequestID == "" {
			t.Fatalf("GET /demo/x: %d, request_id %q, %v", resp.StatusCode, echo.RequestID, err)
		}
		ids = append(ids, echo.RequestID)
	}
	var got []string
	for _, l := range strings.Split(waitLines(t, out, len(ids)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["_aws"] == nil {
			continue
		}
		id, _ := m[metrics.PropertyRequestID].(string)
		got = append(got, id)
	}
	if !reflect.DeepEqual(got, ids) || ids[0] == ids[1] || ids[1] == ids[2] {
		t.Errorf("EMF lines' %s %q, want the demo echo's request ids %q (one each)", metrics.PropertyRequestID, got, ids)
	}
}

// TestTopErrors: one line and exit 1 when it cannot do its work, 2 for a
// wrong command line, 0 for -h.
func TestTopErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		input string
		args  []string
		code  int
		want  string
	}{
		{"no decision lines", "a log line\n{\"level\":\"INFO\"}\n", nil, 1, "no decision lines in the input"},
		{"missing file", "", []string{"/nonexistent/serve.log"}, 1, "no such file"},
		{"bad n", "", []string{"-n", "0"}, 2, "-n 0"},
		{"unknown flag", "", []string{"--nope"}, 2, "nope"},
		{"policies without key", "", []string{"--policies", "x.yaml"}, 2, "--policies is for --key"},
		{"help", "", []string{"-h"}, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("EDGELIMIT_HASH_KEY", "")
			var o, e bytes.Buffer
			code := runTop(context.Background(), tt.args, strings.NewReader(tt.input), &o, &e)
			if code != tt.code || !strings.Contains(e.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, e.String(), tt.code, tt.want)
			}
			if code == 1 && strings.Count(e.String(), "\n") != 1 {
				t.Errorf("stderr is not one line: %q", e.String())
			}
			if code == 0 && !strings.Contains(o.String(), "usage: edgelimit top") {
				t.Errorf("-h printed %q", o.String())
			}
		})
	}
	var o, e bytes.Buffer
	if code := runTop(context.Background(), []string{"--key", "k"}, strings.NewReader(""), &o, &e); code != 1 || !strings.Contains(e.String(), "EDGELIMIT_HASH_KEY") {
		t.Errorf("--key without EDGELIMIT_HASH_KEY: exit %d, %q", code, e.String())
	}
}

// emfLine is what metrics.EMF writes for ev.
func emfLine(t testing.TB, ev edgelimit.Event) []byte {
	m, err := metrics.NewEMF(metrics.EMFConfig{Writer: io.Discard, Function: "fn"})
	if err != nil {
		t.Fatal(err)
	}
	return m.AppendLine(nil, ev)
}

const hashA = "AAAAAAAAAAAAAAAAAAAAAA"

// TestParseDecisionLine: the lines package metrics writes are read back
// (also after a CloudWatch Logs export's prefix); every other line is not a
// decision, and neither is a line whose key is not a hashed key (a raw key
// someone logged) or whose policy is not a policy name.
func TestParseDecisionLine(t *testing.T) {
	denied := emfLine(t, edgelimit.Event{Policy: "paid", Route: "GET /paid/*", Key: hashA})
	allowed := emfLine(t, edgelimit.Event{Policy: "paid", Route: "GET /paid/*", Key: hashA, Allowed: true})
	shadow := emfLine(t, edgelimit.Event{Policy: "paid", Route: "GET /paid/*", Key: hashA, Shadow: true})
	list := emfLine(t, edgelimit.Event{Policy: "blocked", Strategy: "list", Reason: "deny-list"})
	var breaker bytes.Buffer
	m, _ := metrics.NewEMF(metrics.EMFConfig{Writer: &breaker})
	m.ObserveBreaker(edgelimit.BreakerEvent{Store: "durable", State: edgelimit.BreakerOpen, Policies: []string{"paid"}})
	for _, tt := range []struct {
		name string
		line string
		want decisionLine
		ok   bool
	}{
		{"denied", string(denied), decisionLine{Policy: "paid", KeyHash: hashA, Denied: true}, true},
		{"allowed", string(allowed), decisionLine{Policy: "paid", KeyHash: hashA, Allowed: true}, true},
		{"shadow", string(shadow), decisionLine{Policy: "paid", KeyHash: hashA, ShadowDenied: true}, true},
		{"list, no key", string(list), decisionLine{Policy: "blocked", Denied: true}, true},
		{"exported event", "2026-12-02T01:00:00.000Z 2026/12/02/[$LATEST]abc " + string(denied), decisionLine{Policy: "paid", KeyHash: hashA, Denied: true}, true},
		{"CRLF", strings.TrimSuffix(string(denied), "\n") + "\r\n", decisionLine{Policy: "paid", KeyHash: hashA, Denied: true}, true},
		{"breaker line", breaker.String(), decisionLine{}, false},
		{"log line", `{"timestamp":"x","level":"INFO","message":"edgelimit: store failed","policy":"paid"}`, decisionLine{}, false},
		{"not JSON", "edgelimit serve: listening on http://127.0.0.1:8080", decisionLine{}, false},
		{"raw key", strings.Replace(string(denied), hashA, "alice-secret-key", 1), decisionLine{}, false},
		{"bad policy", strings.Replace(string(denied), `"paid"`, `"Paid \u001b[31m"`, 1), decisionLine{}, false},
		{"no Denied", strings.Replace(string(denied), `"Denied":`, `"Dened":`, 1), decisionLine{}, false},
		{"empty", "", decisionLine{}, false},
	} {
		d, ok := parseDecisionLine([]byte(tt.line))
		if ok != tt.ok || d != tt.want {
			t.Errorf("%s: parse %q = %+v, %v; want %+v, %v", tt.name, tt.line, d, ok, tt.want, tt.ok)
		}
	}
}

// TestTopReadsLongLinesAndRanks: a line longer than the reader's buffer is
// skipped whole (and the next line still read), and keys rank by denials,
// then shadow denials, then admissions.
func TestTopReadsLongLinesAndRanks(t *testing.T) {
	b := "BBBBBBBBBBBBBBBBBBBBBB"
	var in bytes.Buffer
	in.WriteString(strings.Repeat("x", maxLine+10) + "\n")
	for range 3 {
		in.Write(emfLine(t, edgelimit.Event{Policy: "p", Key: hashA, Allowed: true}))
	}
	in.Write(emfLine(t, edgelimit.Event{Policy: "p", Key: b}))
	in.WriteString(`{"_aws":` + strings.Repeat(" ", maxLine) + "\n")
	in.Write(emfLine(t, edgelimit.Event{Policy: "p", Key: hashA, Shadow: true}))
	tl := newTally()
	if err := tl.read(&in); err != nil {
		t.Fatal(err)
	}
	rows := tl.top(10, "", nil)
	want := []topRow{{Policy: "p", KeyHash: b, Denied: 1}, {Policy: "p", KeyHash: hashA, Allowed: 3, ShadowDenied: 1}}
	if tl.decisions != 5 || !reflect.DeepEqual(rows, want) {
		t.Errorf("read %d decisions, rows %+v; want 5 and %+v", tl.decisions, rows, want)
	}
}

// FuzzParseDecisionLine: log lines can carry what clients sent; whatever a
// line holds, the parser does not panic, and what it accepts has a policy
// name and a hashed key (or none), so top never prints a client's text.
func FuzzParseDecisionLine(f *testing.F) {
	f.Add(emfLine(f, edgelimit.Event{Policy: "paid", Route: "GET /paid/*", Key: hashA}))
	f.Add([]byte(`x {"_aws":{"CloudWatchMetrics":[{}]},"Policy":"a","Allowed":1,"Denied":0,"KeyHash":"` + hashA + `"}`))
	f.Add([]byte(`{"_aws":null,"Policy":"a"}`))
	f.Add([]byte(`{"_aws":{"CloudWatchMetrics":[1]},"Policy":"a","Allowed":1e400,"Denied":"1"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		d, ok := parseDecisionLine(line)
		if !ok {
			return
		}
		if !isPolicyName(d.Policy) || d.KeyHash != "" && !isKeyHash(d.KeyHash) {
			t.Fatalf("accepted %+v from %q", d, line)
		}
		if bytes.ContainsAny(line, "\r\n") || len(line) > maxLine {
			return // top reads it as other lines
		}
		tl := newTally()
		if err := tl.read(bytes.NewReader(line)); err != nil || tl.decisions != 1 {
			t.Fatalf("tally of an accepted line: %d decisions, %v", tl.decisions, err)
		}
	})
}
