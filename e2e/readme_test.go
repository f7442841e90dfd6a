package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit/internal/faultproxy"
)

// docProgram is a Go code block of the README or docs/handlers.md that is
// a complete program, with the policy file it is shown with.
type docProgram struct {
	file     string // README.md, docs/handlers.md
	src      string
	policies []byte
}

// docPrograms returns the programs of README.md (with the policy file the
// README shows, as examples/ has it) and docs/handlers.md (with the
// project's cmd/edgelimit/policies.yaml, as it says).
func docPrograms(t *testing.T) []docProgram {
	t.Helper()
	readme := readFile(t, "README.md")
	full := []byte(readFile(t, "cmd/edgelimit/policies.yaml"))
	var out []docProgram
	for _, f := range []struct {
		name     string
		policies []byte
	}{{"README.md", []byte(readmePolicy(t, readme))}, {"docs/handlers.md", full}} {
		for _, m := range goBlock.FindAllStringSubmatch(readFile(t, f.name), -1) {
			out = append(out, docProgram{file: f.name, src: m[1], policies: f.policies})
		}
	}
	return out
}

var (
	goBlock   = regexp.MustCompile("(?s)```go\n(.*?)```")
	yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")
)

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmePolicy is the README's one policy file: the first YAML block of
// its "A first limit".
func readmePolicy(t *testing.T, readme string) string {
	t.Helper()
	i := strings.Index(readme, "\n## A first limit\n")
	if i < 0 {
		t.Fatal(`README.md has no section "A first limit"`)
	}
	m := yamlBlock.FindStringSubmatch(readme[i:])
	if m == nil {
		t.Fatal("the README's first limit shows no policy file")
	}
	return m[1]
}

// readmeModule writes each program, with its policy file beside it, into
// a module outside the repository that requires this one (replaced by the
// working tree) at exactly the versions the repository pins, so that
// building needs no network. It returns the programs' dirs.
func readmeModule(t *testing.T, programs []docProgram) (string, []string) {
	t.Helper()
	repo := root(t)
	dir := t.TempDir()
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var mod strings.Builder
	mod.WriteString("module readme.example\n\n")
	sc := bufio.NewScanner(strings.NewReader(string(gomod)))
	for sc.Scan() {
		if line := sc.Text(); !strings.HasPrefix(line, "module ") && !strings.HasPrefix(line, "tool") {
			mod.WriteString(line + "\n")
		}
	}
	fmt.Fprintf(&mod, "\nrequire github.com/edgelimit/edgelimit v0.0.0\n\nreplace github.com/edgelimit/edgelimit => %s\n", repo)
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "go.mod"), []byte(mod.String()))
	write(filepath.Join(dir, "go.sum"), sum)
	var dirs []string
	for i, p := range programs {
		if !strings.HasPrefix(p.src, "package main\n") {
			t.Errorf("%s: Go block %d is not a complete program (it does not start with package main):\n%.200s", p.file, i+1, p.src)
			dirs = append(dirs, "")
			continue
		}
		d := filepath.Join(dir, fmt.Sprintf("prog%d", i+1))
		write(filepath.Join(d, "main.go"), []byte(p.src))
		write(filepath.Join(d, "policies.yaml"), p.policies)
		dirs = append(dirs, d)
	}
	return dir, dirs
}

// buildProgram builds one program for this machine (linux: as Lambda runs
// it) and returns the binary.
func buildProgram(t *testing.T, modDir, progDir string) string {
	t.Helper()
	out := filepath.Join(progDir, "bootstrap")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "build", "-mod=mod", "-tags", "lambda.norpc", "-o", out, ".")
	cmd.Dir = progDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOPROXY=off", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README program in %s does not build outside the repository: %v\n%s", filepath.Base(progDir), err, b)
	}
	return out
}

// TestDocPrograms builds every Go block of the README and of
// docs/handlers.md in a module of its own and runs it as the page says:
// each Lambda function under the Runtime Interface Emulator against
// dynalite, each net/http server over HTTP; each answers with its
// rate-limit headers and its handler's body. (The README's server listens
// on 127.0.0.1:8080; the test builds it with a free port in that literal
// instead, so that a server of the reader's own cannot be in the way.)
func TestDocPrograms(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the emulator runs linux programs")
	}
	programs := docPrograms(t)
	for i, p := range programs {
		if p.file == "README.md" && strings.Contains(p.src, `"127.0.0.1:8080"`) {
			programs[i].src = strings.Replace(p.src, `"127.0.0.1:8080"`, `"`+helloAddr(t)+`"`, 1)
		}
	}
	modDir, dirs := readmeModule(t, programs)
	ran := map[string]bool{}
	for i, d := range dirs {
		if d == "" {
			continue
		}
		p := programs[i]
		bin := buildProgram(t, modDir, d)
		kind := ""
		switch {
		case strings.Contains(p.src, "lambda.Start("):
			kind = "lambda"
		case strings.Contains(p.src, "http.ListenAndServe("):
			kind = "net/http"
		default:
			t.Errorf("%s: Go block %d is neither a Lambda function nor a server: how should a test run it?", p.file, i+1)
			continue
		}
		ran[p.file+" "+kind] = true
		t.Run(p.file+" "+kind, func(t *testing.T) {
			switch {
			case p.file == "README.md" && kind == "lambda":
				runHelloFunction(t, bin)
			case p.file == "README.md":
				runHelloServer(t, bin, helloAddr(t))
			case kind == "lambda":
				runREADMEFunction(t, bin)
				t.Run("cold-start", func(t *testing.T) { runREADMEColdStart(t, bin) })
			default:
				runREADMEServer(t, bin)
			}
		})
	}
	for _, want := range []string{"README.md lambda", "README.md net/http", "docs/handlers.md lambda", "docs/handlers.md net/http"} {
		if !ran[want] {
			t.Errorf("no %s program was found", want)
		}
	}
}

// helloAddr is the address the README's server is built to listen on.
var helloAddrOnce sync.Once
var helloAddrValue string

func helloAddr(t *testing.T) string {
	helloAddrOnce.Do(func() { helloAddrValue = fmt.Sprintf("127.0.0.1:%d", freePort(t)) })
	return helloAddrValue
}

// runHelloFunction: the README's function admits 5 requests of an address
// a minute, then answers 429 with the problem body.
func runHelloFunction(t *testing.T, bin string) {
	endpoint, table := dynalite(t)
	e := startEmulatorOf(t, "hello", bin, map[string]string{"EDGELIMIT_TABLE": table, "EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_OVERRIDES": "hello.store_timeout=5s"}) // a budget a loaded machine cannot miss
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "GET /hello", RawPath: "/hello"}
	ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path, ev.RequestContext.HTTP.SourceIP = "GET", "/hello", "192.0.2.7"
	for i := 1; i <= 6; i++ {
		resp, _ := e.invoke(t, ev)
		if i <= 5 {
			if resp.StatusCode != 200 || resp.Body != "hello\n" || !strings.HasPrefix(header(resp, "RateLimit"), fmt.Sprintf(`"hello";r=%d;t=`, 5-i)) {
				t.Errorf("invocation %d: %d %q %v, want 200 hello, r=%d\n%s", i, resp.StatusCode, resp.Body, resp.Headers, 5-i, e.stderr)
			}
			continue
		}
		if rl := header(resp, "RateLimit"); resp.StatusCode != 429 || !strings.HasPrefix(rl, `"hello";r=0;t=`) || header(resp, "Content-Type") != "application/problem+json" {
			t.Errorf("invocation 6: %d, RateLimit %q, Content-Type %q; want the 429", resp.StatusCode, rl, header(resp, "Content-Type"))
		}
	}
}

// readmeBudgets gives the README function's durable policies a store
// budget that a loaded machine cannot miss: the test checks what the
// program answers, not how fast dynalite is (under load it missed the
// default 100 ms, and the fail-closed policy answered 503).
func readmeBudgets(budget string) string {
	return "paid-daily.store_timeout=" + budget + ",paid-burst.store_timeout=" + budget
}

// runHelloServer: `curl -i http://127.0.0.1:8080/hello` six times, as the
// README says: five 200 hello, then a 429 with RateLimit r=0, Retry-After
// and a problem body.
func runHelloServer(t *testing.T, bin, addr string) {
	stop := startProgram(t, bin, addr, nil)
	defer stop()
	for i := 1; i <= 6; i++ {
		resp, err := http.Get("http://" + addr + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if i <= 5 {
			if resp.StatusCode != 200 || body != "hello\n" {
				t.Errorf("request %d: %d %q, want 200 hello", i, resp.StatusCode, body)
			}
			continue
		}
		if resp.StatusCode != 429 || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"hello";r=0;t=`) || resp.Header.Get("Retry-After") == "" ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("request 6: %d %v %q, want the 429", resp.StatusCode, resp.Header, body)
		}
	}
}

// startProgram runs bin in its directory until the test ends, waiting
// until addr answers HTTP.
func startProgram(t *testing.T, bin, addr string, env []string) func() {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	if err := waitAnswers(addr, done, startTimeout); err != nil {
		stop()
		t.Fatalf("the program did not answer on %s: %v\n%s", addr, err, out.String())
	}
	return stop
}

func runREADMEFunction(t *testing.T, bin string) {
	endpoint, table := dynalite(t)
	e := startEmulatorOf(t, "readme", bin, map[string]string{
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_SECRETS":           "k1:" + randomKey(),
		// The store budget of the functions' tests (testBudget): the first
		// invocation's calls to a dynalite that make test shares passed the
		// default 100 ms, and the paid policies' 503 failed the test.
		"EDGELIMIT_OVERRIDES": readmeBudgets(testBudget),
	})
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "GET /paid/{resource}", RawPath: "/paid/report",
		Headers: map[string]string{"x-api-key": "readme-" + randomID(t)}}
	ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path, ev.RequestContext.HTTP.SourceIP = "GET", "/paid/report", "192.0.2.10"
	resp, _ := e.invoke(t, ev)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Body, "hello: 999 of 1000 left (policy paid-daily)") {
		t.Fatalf("README function: %d %q %v\n%s", resp.StatusCode, resp.Body, resp.Headers, e.stderr)
	}
	if got := header(resp, "RateLimit"); !strings.Contains(got, `"paid-daily";r=999`) {
		t.Errorf("RateLimit = %q", got)
	}
	// Without the key header: the policy's 400, from the middleware.
	delete(ev.Headers, "x-api-key")
	if resp, _ := e.invoke(t, ev); resp.StatusCode != 400 {
		t.Errorf("no key: status %d, want 400", resp.StatusCode)
	}
}

// runREADMEColdStart (issue "when the store fails, fail fast", item 3: a
// cold start's first DynamoDB call pays DNS, TCP and TLS, missed the
// store_timeout, and the fail-closed paid-daily answered 503): the README
// function under the emulator, its store behind a proxy that makes new
// connections slower than the policies' budget. The function opens its
// connection while it starts (setup.FromEnv's warm-up), so its first
// request's first store call goes over that connection and it is answered
// 200; without the warm-up every call opens a connection, and the same
// first request is a 503. The budget is the e2e tests' 5s and the delay 6s,
// not the 100 ms and 150 ms of a real cold start, so that a loaded machine
// cannot change either answer. With the warm-up only the warm-up's
// connection is slow: net/http drops a connection whose request write it
// has not seen finish 50 ms after the answer, which a loaded machine can
// make a later call's lot, and that call's new connection is not what is
// tested.
func runREADMEColdStart(t *testing.T, bin string) {
	endpoint, table := dynalite(t)
	for _, tc := range []struct {
		warmUp string
		slow   int // how many new connections are slow (-1: every one)
		status int
		fresh  bool // the first request's first call opens a connection
	}{
		{"10s", 1, 200, false},
		{"off", -1, 503, true},
	} {
		t.Run("warm-up="+tc.warmUp, func(t *testing.T) {
			proxy, err := faultproxy.New(endpoint)
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			// New connections of the function's clients are slow to set up
			// (DNS, TCP, TLS); the ones they keep open are not.
			proxy.DelayConnections(tc.slow, 6*time.Second)
			var mu sync.Mutex
			var seen []faultproxy.Seen
			proxy.Inspect(func(s faultproxy.Seen) { mu.Lock(); seen = append(seen, s); mu.Unlock() })
			e := startEmulatorOf(t, "readme", bin, map[string]string{
				"EDGELIMIT_TABLE":             table,
				"EDGELIMIT_DYNAMODB_ENDPOINT": proxy.URL(),
				"EDGELIMIT_SECRETS":           "k1:" + randomKey(),
				"EDGELIMIT_OVERRIDES":         readmeBudgets(testBudget),
				"EDGELIMIT_STORE_WARMUP":      tc.warmUp,
				"EDGELIMIT_LOG_LEVEL":         "debug", // each warm-up says it opened a connection
			})
			ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "GET /paid/{resource}", RawPath: "/paid/report",
				Headers: map[string]string{"x-api-key": "cold-" + randomID(t)}}
			ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path, ev.RequestContext.HTTP.SourceIP = "GET", "/paid/report", "192.0.2.11"
			// The emulator starts the function with the first invocation; a
			// warm-up's request is the first on its connection, and logs.
			resp, _ := e.invoke(t, ev)
			warms := strings.Count(e.output(), "edgelimit: store warm")
			fresh := proxy.FreshRequests() > int64(warms)
			if !tc.fresh {
				// The calls after the warm-ups came over connections served
				// at once, in the order they were made.
				mu.Lock()
				slices.SortFunc(seen, func(a, b faultproxy.Seen) int { return a.At.Compare(b.At) })
				fresh = len(seen) <= warms || seen[warms].Fresh
				mu.Unlock()
			}
			if fresh != tc.fresh {
				t.Errorf("the first request's first store call opened a connection: %v, want %v (%d of %d requests first on theirs)",
					fresh, tc.fresh, proxy.FreshRequests(), proxy.Requests())
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("first request: %d %q, want %d (%d connections, %d requests)\n%s", resp.StatusCode, resp.Body, tc.status, proxy.Connections(), proxy.Requests(), e.output())
			}
		})
	}
}

func runREADMEServer(t *testing.T, bin string) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	stop := startProgram(t, bin, addr, []string{"ADDR=" + addr, "EDGELIMIT_SECRETS=k1:" + randomKey()})
	defer stop()
	get := func(key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/paid/report", nil)
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := get("alice")
	body := readAll(t, resp)
	if resp.StatusCode != 200 || body != "report report: 999 requests left today\n" {
		t.Errorf("README server: %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("RateLimit"); !strings.Contains(got, `"paid-daily";r=999`) {
		t.Errorf("RateLimit = %q", got)
	}
	if resp := get(""); resp.StatusCode != 400 {
		t.Errorf("no key: status %d, want 400", resp.StatusCode)
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestShapingExcerpts: every YAML block of docs/shaping.md names the
// policy file it comes from on its first line, and the rest of the block
// is in that file as written, so the excerpts cannot drift from the
// policies the functions embed.
func TestShapingExcerpts(t *testing.T) {
	section := readFile(t, "docs/shaping.md")
	blocks := regexp.MustCompile("(?s)```yaml\n# ([^\n]+)\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) < 2 {
		t.Fatalf("docs/shaping.md has %d YAML excerpts, want the tts and the login policies", len(blocks))
	}
	for _, m := range blocks {
		file, excerpt := m[1], m[2]
		data, err := os.ReadFile(filepath.Join(root(t), file))
		if err != nil {
			t.Errorf("an excerpt names %s: %v", file, err)
			continue
		}
		if !strings.Contains(string(data), excerpt) {
			t.Errorf("docs/shaping.md's excerpt of %s is not in the file:\n%s", file, excerpt)
		}
	}
}
