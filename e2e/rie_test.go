package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// The Lambda Runtime Interface Emulator, pinned (mk/lambda.mk pins the same
// version; TestMakefilePinsTheSameEmulator checks).
const (
	rieModule  = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"
	rieVersion = "v0.0.0-20261030222936-bef5c4ba774d"
)

// Bounds of the harness: none is a timing assertion, only a limit on how
// long a broken run may hang.
const (
	startTimeout  = 20 * time.Second
	invokeTimeout = 60 * time.Second
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildDir holds the bootstraps the tests built; TestMain removes it.
var (
	buildMu  sync.Mutex
	buildDir string
)

// skipOrFail skips on a developer's machine and fails in CI, where
// everything the tests need must be installed.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// repoRoot is the module root (this package is e2e/ in it).
var repoRoot = sync.OnceValues(func() (string, error) {
	dir, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("module root not found above e2e/: %w", err)
	}
	return dir, nil
})

func root(t testing.TB) string {
	t.Helper()
	dir, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// goTool is the go command: go test puts the GOROOT/bin of the go command
// that runs it first in the tests' PATH.
func goTool() string { return "go" }

// installRIE returns the emulator's path, installing the pinned version
// into .tools/bin when it is missing or another version.
var installRIE = sync.OnceValues(func() (string, error) {
	dir, err := repoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, ".tools", "bin")
	path := filepath.Join(bin, "aws-lambda-rie")
	if out, err := exec.Command(goTool(), "version", "-m", path).Output(); err == nil &&
		bytes.Contains(out, []byte("github.com/aws/aws-lambda-runtime-interface-emulator\t"+rieVersion)) {
		return path, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "install", rieModule+"@"+rieVersion)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %v\n%s", rieModule, rieVersion, err, out)
	}
	return path, nil
})

func rie(t testing.TB) string {
	t.Helper()
	path, err := installRIE()
	if err != nil {
		skipOrFail(t, "the Lambda Runtime Interface Emulator is not installed and cannot be: %v", err)
	}
	return path
}

// builds caches each architecture's bootstraps, built once per test binary
// with the flags of `make build`.
var builds sync.Map // goarch -> func() (map[string]string, error)

// buildFunctions returns the path of every function's bootstrap for
// linux/goarch (the machine's own architecture to run, arm64 to measure
// what is deployed), building them on first use.
func buildFunctions(goarch string) (map[string]string, error) {
	f, _ := builds.LoadOrStore(goarch, sync.OnceValues(func() (map[string]string, error) {
		return buildAll(goarch)
	}))
	return f.(func() (map[string]string, error))()
}

func buildAll(goarch string) (map[string]string, error) {
	dir, err := repoRoot()
	if err != nil {
		return nil, err
	}
	buildMu.Lock()
	if buildDir == "" {
		buildDir, err = os.MkdirTemp("", "edgelimit-e2e-")
	}
	base := buildDir
	buildMu.Unlock()
	if err != nil {
		return nil, err
	}
	return buildTree(dir, goarch, filepath.Join(base, goarch), lambdaTags)
}

// lambdaTags are the build tags of `make build` (LAMBDA_TAGS in
// mk/lambda.mk; TestBuildTagsAreMakeBuilds keeps them in step).
const lambdaTags = "lambda.norpc,nethttpomithttp2,edgelimit.noyaml,edgelimit.nopowgate"

// programTags are the build tags of a Lambda program of one's own (make
// run-lambda's PROGRAM_TAGS): it reads its policy file with setup.FromEnv,
// so without edgelimit.noyaml.
const programTags = "lambda.norpc,nethttpomithttp2"

// buildTree builds every example function of the checkout at dir for
// linux/goarch into out/<fn>/bootstrap, with the flags of `make build` and
// the build tags given.
func buildTree(dir, goarch, out, tags string) (map[string]string, error) {
	args := []string{"build", "-tags", tags, "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(out, "bin") + "/"}
	for _, f := range handlers.All() {
		args = append(args, "./functions/"+f.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("GOARCH=%s go %s: %v\n%s", goarch, strings.Join(args, " "), err, b)
	}
	paths := map[string]string{}
	for _, f := range handlers.All() {
		fnDir := filepath.Join(out, f.Name)
		if err := os.MkdirAll(fnDir, 0o755); err != nil {
			return nil, err
		}
		p := filepath.Join(fnDir, "bootstrap")
		if err := os.Rename(filepath.Join(out, "bin", f.Name), p); err != nil {
			return nil, err
		}
		paths[f.Name] = p
	}
	return paths, nil
}

// bootstrap returns function name's bootstrap for this machine.
func bootstrap(t testing.TB, name string) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("the Lambda Runtime Interface Emulator runs linux bootstraps; this is %s", runtime.GOOS)
	}
	paths, err := buildFunctions(runtime.GOARCH)
	if err != nil {
		t.Fatalf("build the functions: %v", err)
	}
	p, ok := paths[name]
	if !ok {
		t.Fatalf("no function %q", name)
	}
	return p
}

// syncBuffer collects a process's output.
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

// emulator is one function running under aws-lambda-rie on loopback.
type emulator struct {
	name           string
	url            string
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	invocations    int
	// lastID is the request id of the last invocation sent.
	lastID string
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// baseEnv is what Lambda's environment holds that the functions may read,
// plus a hash key: the emulator passes its whole environment on to the
// function, so nothing of the test's environment leaks in.
func baseEnv(name string) map[string]string {
	return map[string]string{
		"PATH":                        "/usr/bin:/bin",
		"TZ":                          "UTC",
		"AWS_REGION":                  "us-east-1",
		"AWS_LAMBDA_FUNCTION_NAME":    name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT": "30",
		"EDGELIMIT_HASH_KEY":          randomKey(),
	}
}

func randomKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// startEmulator runs function name's bootstrap under the emulator with env
// (on top of baseEnv) and waits until the emulator accepts connections. The
// function itself starts (its init runs) on the first invocation, as on
// Lambda. The emulator and the function stop when the test ends.
func startEmulator(t *testing.T, name string, env map[string]string) *emulator {
	t.Helper()
	return startEmulatorOf(t, name, bootstrap(t, name), env)
}

// startEmulatorOf is startEmulator for the bootstrap at boot.
func startEmulatorOf(t *testing.T, name, boot string, env map[string]string) *emulator {
	t.Helper()
	// A free port can be taken by another process between our probe and the
	// emulator's listen: try again with new ports, a bounded number of times.
	for attempt := 1; ; attempt++ {
		e, err := tryStartEmulator(t, name, boot, env)
		if err == nil {
			return e
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
}

func tryStartEmulator(t *testing.T, name, boot string, env map[string]string) (*emulator, error) {
	t.Helper()
	rieBin := rie(t)
	all := baseEnv(name)
	for k, v := range env {
		all[k] = v
	}
	var environ []string
	for k, v := range all {
		environ = append(environ, k+"="+v)
	}
	port := freePort(t)
	e := &emulator{
		name:   name,
		url:    fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", port),
		stdout: &syncBuffer{},
		stderr: &syncBuffer{},
		done:   make(chan struct{}),
	}
	e.cmd = exec.Command(rieBin,
		"--runtime-interface-emulator-address", fmt.Sprintf("127.0.0.1:%d", port),
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--log-level", "info", // info has INIT REPORT(durationMs: ...)
		boot)
	e.cmd.Dir = filepath.Dir(boot)
	e.cmd.Env = environ
	e.cmd.Stdout, e.cmd.Stderr = e.stdout, e.stderr
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the emulator: %w", err)
	}
	go func() { _ = e.cmd.Wait(); close(e.done) }()
	t.Cleanup(e.stop)
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return e, nil
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("the emulator exited before listening:\n%s%s", e.stdout, e.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the emulator did not listen within %s:\n%s%s", startTimeout, e.stdout, e.stderr)
		}
	}
}

// stop ends the emulator and the function (its process group).
func (e *emulator) stop() {
	select {
	case <-e.done:
		return
	default:
	}
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
		<-e.done
	}
}

// invokeError is what the runtime answers when the function failed.
type invokeError struct {
	ErrorType    string `json:"errorType"`
	ErrorMessage string `json:"errorMessage"`
}

// post sends one invocation (never concurrently: the emulator does not
// survive concurrent invokes) and returns the status and body.
func (e *emulator) post(t *testing.T, payload []byte, requestID string) (int, []byte) {
	t.Helper()
	e.invocations++
	e.lastID = requestID
	ctx, cancel := context.WithTimeout(context.Background(), invokeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amzn-RequestId", requestID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("invoke %s: %v\noutput:\n%s", e.name, err, e.output())
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// failed reports whether an invocation's answer is a failure of the
// function rather than its response.
func failed(status int, body []byte) bool {
	var ie invokeError
	return status >= 300 || json.Unmarshal(body, &ie) == nil && ie.ErrorType != ""
}

// invokeRaw sends one invocation and returns the function's response. A
// function that could not start because a strategy it uses is missing from
// the tree skips the test, naming the missing piece; any other failure
// fails it.
func (e *emulator) invokeRaw(t *testing.T, payload []byte, requestID string) []byte {
	t.Helper()
	status, body := e.post(t, payload, requestID)
	if !failed(status, body) {
		return body
	}
	if msg := e.initError(); msg != "" {
		if missingPieces.MatchString(msg) {
			t.Skipf("functions/%s cannot start in this tree yet: %s", e.name, msg)
		}
		t.Fatalf("functions/%s failed its init: %s", e.name, msg)
	}
	t.Fatalf("invoke %s: status %d, body %s\noutput:\n%s", e.name, status, body, e.output())
	return nil
}

// missingPieces are the init errors of a function whose strategy or
// algorithm has not landed in this tree yet.
var missingPieces = regexp.MustCompile(`not available in this build|not implemented yet`)

// initError returns the error the function's main logged when its init
// failed, or "".
func (e *emulator) initError() string {
	for _, line := range strings.Split(e.output(), "\n") {
		var rec struct {
			Msg   string `json:"msg"`
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "edgelimit: init failed" {
			return rec.Error
		}
	}
	return ""
}

// invoke sends ev and decodes the API Gateway response. Each invocation
// gets the request id "<function>-<n>", which the function's logs carry.
func (e *emulator) invoke(t *testing.T, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, string) {
	t.Helper()
	id := fmt.Sprintf("%s-%d", e.name, e.invocations+1)
	ev.RequestContext.RequestID = id
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	body := e.invokeRaw(t, payload, id)
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("response %q is not an API Gateway v2 response: %v", body, err)
	}
	return resp, id
}

// initReport is the emulator's record of the function's init phase: from
// starting the bootstrap until the runtime first asks for an invocation
// (GET /runtime/invocation/next), which is what Lambda bills and reports as
// Init Duration. (The "Init Duration" of the emulator's REPORT line measures
// only its own hand-off, a few microseconds.)
var initReport = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)

// initDuration returns the function's init duration in milliseconds; it is
// known once the first invocation has been answered.
func (e *emulator) initDuration(t *testing.T) float64 {
	t.Helper()
	// The emulator writes the report beside the response, not before it:
	// on a loaded machine the line can come a moment after the answer.
	m := initReport.FindStringSubmatch(e.stderr.String())
	for deadline := time.Now().Add(invokeTimeout); m == nil && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		m = initReport.FindStringSubmatch(e.stderr.String())
	}
	if m == nil {
		t.Fatalf("no INIT REPORT in the emulator's log within %s:\n%s", invokeTimeout, e.stderr)
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// jsonLines returns stream's lines that are JSON objects.
func jsonLines(stream string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(stream, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// emfLines returns the function's EMF metric lines.
func (e *emulator) emfLines() []map[string]any {
	var out []map[string]any
	for _, m := range jsonLines(e.stdout.String()) {
		if _, ok := m["_aws"]; ok {
			out = append(out, m)
		}
	}
	return out
}

// output is everything the function wrote: the emulator passes the
// function's stdout and stderr on to its own stdout, between its START,
// END and REPORT lines; its own logs go to its stderr.
func (e *emulator) output() string { return e.stdout.String() + e.stderr.String() }

// logLines returns the function's JSON log lines.
func (e *emulator) logLines() []map[string]any {
	var out []map[string]any
	for _, m := range jsonLines(e.output()) {
		if _, ok := m["message"]; ok {
			out = append(out, m)
		}
	}
	return out
}

// sampleEvent is a real API Gateway HTTP API event (the aws-lambda-go
// sample in testdata/), readied for method, target and the client address.
func sampleEvent(t *testing.T, method, target, sourceIP string, headers map[string]string, body string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "http-api-event.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	path, query, _ := strings.Cut(target, "?")
	ev.RawPath, ev.RawQueryString = path, query
	ev.RouteKey = method + " " + path
	ev.RequestContext.RouteKey = ev.RouteKey
	ev.RequestContext.HTTP.Method = method
	ev.RequestContext.HTTP.Path = path
	ev.RequestContext.HTTP.SourceIP = sourceIP
	now := time.Now()
	ev.RequestContext.TimeEpoch = now.UnixMilli()
	ev.RequestContext.Time = now.UTC().Format("02/Jan/2006:15:04:05 -0700")
	ev.QueryStringParameters = nil
	if query != "" {
		values, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		ev.QueryStringParameters = map[string]string{}
		for k, v := range values {
			// API Gateway joins repeated parameters with commas.
			ev.QueryStringParameters[k] = strings.Join(v, ",")
		}
	}
	ev.Headers["x-forwarded-for"] = sourceIP
	ev.Headers["content-length"] = strconv.Itoa(len(body))
	for k, v := range headers {
		ev.Headers[strings.ToLower(k)] = v
	}
	ev.Body = body
	return ev
}

// header returns a response header, case-insensitively.
func header(resp events.APIGatewayV2HTTPResponse, name string) string {
	for k, v := range resp.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// dynalite returns the endpoint of the dynalite server of the test-server
// runner and a fresh table on it.
func dynalite(t *testing.T) (endpoint, table string) {
	t.Helper()
	endpoint = os.Getenv(ddbtest.EnvDynalite)
	if endpoint == "" {
		skipOrFail(t, "%s is not set: run under the test-server runner (make test or make e2e)", ddbtest.EnvDynalite)
	}
	_, table, _ = ddbtest.Table(t, ddbtest.Server{Name: "dynalite", Endpoint: endpoint})
	return endpoint, table
}

// closedEndpoint returns a loopback URL where nothing listens: a DynamoDB
// that is down.
func closedEndpoint(t *testing.T) string {
	return fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
}

var errNoEMF = errors.New("no EMF line")

// lastEMF returns the last EMF line for policy that the last invocation
// wrote: the line whose requestId is that invocation's. The emulator copies
// the function's output to its own stdout on its own schedule, so a line
// can arrive after the invocation's answer (and a line of the invocation
// before it after this one began): it waits for the line (up to
// invokeTimeout), never for a fixed time.
func (e *emulator) lastEMF(policy string) (map[string]any, error) {
	id := e.lastID
	deadline := time.Now().Add(invokeTimeout)
	for {
		lines := e.emfLines()
		for i := len(lines) - 1; i >= 0; i-- {
			if lines[i]["Policy"] == policy && lines[i]["requestId"] == id {
				return lines[i], nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w for policy %s from invocation %s", errNoEMF, policy, id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
