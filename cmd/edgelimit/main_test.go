package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
)

// syncBuffer is a bytes.Buffer safe to read while serve writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listenRe = regexp.MustCompile(`listening on (http://[0-9.:]+)`)

// startServe runs `edgelimit serve` in-process on a free port and returns
// its base URL; the server stops when the test ends.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), pw, stderr)
		pw.Close()
	}()
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
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
		return u
	case code := <-done:
		t.Fatalf("serve exited with %d: %s", code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start: %s", stderr.String())
	}
	return ""
}

// demoPolicies give the store 5 s: in `make test` dynalite and moto are
// shared with other packages' concurrency tests, and a call past the
// default 100 ms budget would make a durable policy answer 503.
const demoPolicies = `version: 1
policies:
  - name: demo
    routes: ["ANY /demo", "ANY /demo/*"]
    key: ip
    strategy: durable
    limit: 5
    window: 1m
    store_timeout: 5s
  - name: paid
    routes: ["GET /paid/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 3
    window: 1d
    store_timeout: 5s
  - name: contact
    routes: ["GET /contact"]
    key: ip
    strategy: kv
    limit: 4
    window: 1m
    store_timeout: 5s
`

func writePolicies(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// burst sends n requests and checks that exactly limit are 2xx, then every
// other one a 429 with the right headers and problem body.
func burst(t *testing.T, url string, n, limit int, header map[string]string, policy string) {
	t.Helper()
	for i := 1; i <= n; i++ {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("RateLimit-Policy"); !strings.HasPrefix(got, fmt.Sprintf(`"%s";q=%d;w=`, policy, limit)) {
			t.Errorf("request %d: RateLimit-Policy = %q", i, got)
		}
		remaining := max(limit-i, 0)
		if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, fmt.Sprintf(`"%s";r=%d;t=`, policy, remaining)) {
			t.Errorf("request %d: RateLimit = %q, want r=%d", i, got, remaining)
		}
		if i <= limit {
			if resp.StatusCode != 200 {
				t.Fatalf("request %d: status %d, want 200: %s", i, resp.StatusCode, body)
			}
			continue
		}
		if resp.StatusCode != 429 {
			t.Fatalf("request %d: status %d, want 429", i, resp.StatusCode)
		}
		if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("request %d: Retry-After = %q", i, ra)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("request %d: Content-Type = %q", i, ct)
		}
		var p limitertest.Problem
		if err := json.Unmarshal(body, &p); err != nil || p.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != policy {
			t.Errorf("request %d: body %s", i, body)
		}
	}
}

func TestServeBurstMemory(t *testing.T) {
	url := startServe(t, "--policies", writePolicies(t, demoPolicies))
	burst(t, url+"/demo/x", 8, 5, nil, "demo")
	burst(t, url+"/paid/report", 5, 3, map[string]string{"X-Api-Key": "key-1"}, "paid")
	burst(t, url+"/contact", 6, 4, nil, "contact")
	// A missing key is the client's 400, not a 5xx.
	resp, err := http.Get(url + "/paid/report")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("missing API key: status %d, want 400", resp.StatusCode)
	}
	// Unguarded routes reach the handler untouched.
	resp, err = http.Get(url + "/free")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
		t.Errorf("unguarded route: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestServeBurstDynamoDB(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		table := fmt.Sprintf("serve-%d", time.Now().UnixNano())
		url := startServe(t, "--policies", writePolicies(t, demoPolicies), "--store", "dynamodb",
			"--dynamodb-endpoint", s.Endpoint, "--table", table, "--create-table")
		burst(t, url+"/demo", 7, 5, nil, "demo")
		burst(t, url+"/contact", 6, 4, nil, "contact")
	})
}

func TestServeClearErrors(t *testing.T) {
	policies := writePolicies(t, demoPolicies)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tests := []struct {
		name string
		args []string
		want string
		ddb  bool
		code int
	}{
		{"port in use", []string{"--addr", ln.Addr().String(), "--policies", policies}, "the port is already in use", false, 1},
		{"bad policy file", []string{"--policies", writePolicies(t, "version: 1\npolicies:\n  - name: x\n    window: 10\n")}, `policies.yaml:4: policy "x": window "10" needs a unit`, false, 1},
		{"unreachable endpoint", []string{"--policies", policies, "--store", "dynamodb", "--dynamodb-endpoint", "http://127.0.0.1:1", "--table", "tbl"}, "cannot reach DynamoDB at http://127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused; is the server running?", false, 1},
		{"bad store", []string{"--policies", policies, "--store", "redis"}, `--store "redis" is not one of memory, dynamodb`, false, 2},
		{"missing table", []string{"--policies", policies, "--store", "dynamodb", "--table", "no-such-table"}, `table "no-such-table" does not exist at http://127.0.0.1:`, true, 1},
		// Regression: --kv-regions (and every other flag of the DynamoDB
		// store) was ignored with the memory store, without a word.
		{"dynamodb flag on memory", []string{"--policies", policies, "--kv-regions", "us-east-1,eu-west-1"}, "--kv-regions is for --store dynamodb", false, 2},
		{"table on memory", []string{"--policies", policies, "--table", "x"}, "--table is for --store dynamodb", false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"serve"}, tt.args...)
			if tt.ddb {
				servers := ddbtest.Servers(t)
				args = append(args, "--dynamodb-endpoint", servers[0].Endpoint)
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), args, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit code %d, want %d", code, tt.code)
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			last := lines[len(lines)-1]
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr = %q, want %q", stderr.String(), tt.want)
			}
			if len(last) > 300 {
				t.Errorf("error line is %d characters; want one clear line", len(last))
			}
		})
	}
}

func TestCheck(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"check", "policies.yaml"}, &stdout, &stderr); code != 0 {
		t.Fatalf("check policies.yaml: exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"ROUTE", "GET /paid/*", "paid-daily", "paid-burst", "gcra burst=20", "POST /tts", "proof of work 16 bits/10s",
		"overrides=1m ban=20/1h:15m", "policies OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	// The engine's own fields are in NOTES: a charge after the response
	// with its reservation, max_delay.
	stdout.Reset()
	shaped := writePolicies(t, "version: 1\npolicies:\n"+
		"  - {name: llm, routes: [\"POST /llm\"], key: ip, strategy: durable, limit: 1000, window: 1h, charge: response, reserve: 50}\n"+
		"  - {name: smooth, routes: [\"GET /s\"], key: ip, strategy: durable, algorithm: gcra, limit: 10, window: 1s, burst: 5, max_delay: 300ms}\n")
	if code := run(context.Background(), []string{"check", shaped}, &stdout, &stderr); code != 0 {
		t.Fatalf("check: exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"charge=response reserve=50", "max_delay=300ms"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, stdout.String())
		}
	}
	// OPTIONS is the strategy's own fields, NOTES the fields every
	// strategy's policy has (max_delay among them): each in its column.
	lines := strings.Split(stdout.String(), "\n")
	opt, key, notes := strings.Index(lines[0], "OPTIONS"), strings.Index(lines[0], "KEY"), strings.Index(lines[0], "NOTES")
	for _, line := range lines[1:] {
		if !strings.HasPrefix(line, "GET /s ") {
			continue
		}
		if len(line) < notes || strings.TrimSpace(line[opt:key]) != "gcra burst=5" || strings.TrimSpace(line[notes:]) != "max_delay=300ms" {
			t.Errorf("smooth: OPTIONS %q and NOTES %q, want \"gcra burst=5\" and \"max_delay=300ms\":\n%s", line[opt:key], line[min(notes, len(line)):], stdout.String())
		}
	}
	// Regression (issue 15, item 5): a signed policy is not listed with an
	// algorithm it does not have.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "POST /tts") && strings.Contains(line, "fixed-window") {
			t.Errorf("the signed policy is listed with a durable algorithm: %q", line)
		}
	}
	stdout.Reset()
	stderr.Reset()
	bad := writePolicies(t, "version: 1\npolicies:\n  - name: x\n    routes: [\"GET /x\"]\n    key: ip\n    strategy: durable\n    limit: 1\n    window: 1m\n    colour: red\n")
	if code := run(context.Background(), []string{"check", bad}, &stdout, &stderr); code != 1 {
		t.Errorf("check bad file: exit %d, want 1", code)
	}
	if want := `policies.yaml:9: policy "x": unknown field "colour"`; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr = %q, want %q", stderr.String(), want)
	}
	if code := run(context.Background(), []string{"check"}, &stdout, &stderr); code != 2 {
		t.Errorf("check without file: exit %d, want 2", code)
	}
	if code := run(context.Background(), []string{"frobnicate"}, &stdout, &stderr); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
}

const signedPolicies = `version: 1
policies:
  - name: tts
    routes: ["POST /tts"]
    key: ip
    strategy: signed
    limit: 10
    window: 1m
    proof_of_work: {bits: 8, ttl: 10s}
`

// edgelimit get against edgelimit serve: each proof buys exactly `limit`
// requests, so 25 requests cost 3 proofs and all succeed.
func TestGetSpendsExactlyLimitPerProof(t *testing.T) {
	url := startServe(t, "--policies", writePolicies(t, signedPolicies))
	for _, tt := range []struct{ n, proofs int }{{10, 1}, {25, 3}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"get", "-v", "-i", "-X", "POST", "-H", "Content-Type: application/json", "-d", `{"text":"hello"}`, "-n", fmt.Sprint(tt.n), url + "/tts"}, &stdout, &stderr)
		if code != 0 {
			t.Fatalf("get -n %d: exit %d\nstderr: %s\nstdout: %s", tt.n, code, stderr.String(), stdout.String())
		}
		if got := strings.Count(stdout.String(), " 200 OK"); got != tt.n {
			t.Errorf("get -n %d: %d responses 200, want %d", tt.n, got, tt.n)
		}
		if got := strings.Count(stderr.String(), "* solved"); got != tt.proofs {
			t.Errorf("get -n %d: solved %d challenges, want %d:\n%s", tt.n, got, tt.proofs, stderr.String())
		}
		if !strings.Contains(stdout.String(), `Ratelimit: "tts";r=0;t=`) {
			t.Errorf("get -n %d: no response showed the window spent:\n%s", tt.n, stdout.String())
		}
	}
}

// get -o writes the body (tts answers a WAV file) instead of printing it.
func TestGetOutputFile(t *testing.T) {
	url := startServe(t, "--policies", writePolicies(t, signedPolicies))
	out := filepath.Join(t.TempDir(), "hello.wav")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"get", "-X", "POST", "-H", "Content-Type: application/json", "-d", `{"text":"hello"}`, "-o", out, url + "/tts"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("get -o: exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(b, []byte("RIFF")) || stdout.Len() != 0 {
		t.Errorf("get -o wrote %d bytes (%v) starting %q, stdout %q; want a WAV file and nothing printed", len(b), err, b[:min(len(b), 4)], stdout.String())
	}
}

func TestServeDemoPage(t *testing.T) {
	url := startServe(t, "--policies", writePolicies(t, signedPolicies))
	for path, want := range map[string]string{"/": `data-path="/tts"`, "/pow.js": "leading"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
}

func TestSolveAndKeygen(t *testing.T) {
	url := startServe(t, "--policies", writePolicies(t, signedPolicies))
	resp, err := http.Post(url+"/tts", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	challenge := resp.Header.Get("Edgelimit-Challenge")
	if resp.StatusCode != 429 || challenge == "" {
		t.Fatalf("first POST /tts: %d, challenge %q; want 429 with a challenge", resp.StatusCode, challenge)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"solve", challenge}, &stdout, &stderr); code != 0 {
		t.Fatalf("solve: exit %d: %s", code, stderr.String())
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/tts", strings.NewReader(`{"text":"hello"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Edgelimit-Proof", strings.TrimSpace(stdout.String()))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Edgelimit-Token") == "" {
		t.Errorf("POST with the proof: %d, token %q; want 200 with a token", resp.StatusCode, resp.Header.Get("Edgelimit-Token"))
	}
	if code := run(context.Background(), []string{"solve", "not-a-challenge"}, &stdout, &stderr); code != 1 {
		t.Errorf("solve garbage: exit %d, want 1", code)
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"keygen"}, &stdout, &stderr); code != 0 {
		t.Fatalf("keygen: exit %d", code)
	}
	t.Setenv("EDGELIMIT_SECRETS", strings.TrimSpace(stdout.String()))
	if _, err := keyRing(io.Discard); err != nil {
		t.Errorf("keygen output is not a valid key ring: %v", err)
	}
}

// Regression (issue 15, item 5): check and serve report a bad file by the
// path as given, at the true line, in one clean message each.
func TestPolicyFileMessages(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("sub/dir", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("sub/dir/x.yaml", []byte("version: 1\npolicies:\n  - name: a\n    routes: [\"GET /a\"\n    key: ip\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const problem = `sub/dir/x.yaml:4: not valid YAML: did not find expected ',' or ']'`
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"check", "sub/dir/x.yaml"}, &stdout, &stderr); code != 1 || stderr.String() != problem+"\n" {
		t.Errorf("check: exit %d, stderr %q; want 1 and %q", code, stderr.String(), problem+"\n")
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"serve", "--policies", "sub/dir/x.yaml"}, &stdout, &stderr); code != 1 || stderr.String() != "edgelimit serve: "+problem+"\n" {
		t.Errorf("serve: exit %d, stderr %q; want 1 and %q", code, stderr.String(), "edgelimit serve: "+problem+"\n")
	}
}

// TestServeKVRegions: --kv-regions puts kv policies on a table replicated
// over regions, as EDGELIMIT_KV_REGIONS does on Lambda: a decision writes
// this region's part of the bucket ("…@<region>", the client's region),
// and a list without this region is a clear error.
func TestServeKVRegions(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		table := fmt.Sprintf("serve-kv-%d", time.Now().UnixNano())
		policies := writePolicies(t, demoPolicies)
		url := startServe(t, "--policies", policies, "--store", "dynamodb",
			"--dynamodb-endpoint", s.Endpoint, "--table", table, "--create-table", "--kv-regions", "us-east-1,eu-west-1")
		burst(t, url+"/contact", 5, 4, nil, "contact")
		client, _ := ddbtest.Client(t, s)
		out, err := client.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, it := range out.Items {
			if pk, ok := it["pk"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(pk.Value, "kv#contact#") {
				parts = append(parts, pk.Value)
			}
		}
		if len(parts) != 1 || !strings.HasSuffix(parts[0], "@us-east-1") {
			t.Errorf("kv items %q; want one, this region's part (…@us-east-1)", parts)
		}

		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--policies", policies, "--store", "dynamodb",
			"--dynamodb-endpoint", s.Endpoint, "--table", table, "--kv-regions", "eu-west-1,eu-central-1"}, &stdout, &stderr)
		if want := `does not name this region, us-east-1`; code != 1 || !strings.Contains(stderr.String(), want) {
			t.Errorf("--kv-regions without this region: exit %d, stderr %q; want 1 and %q", code, stderr.String(), want)
		}
	})
}
