package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// edgelimitBin builds cmd/edgelimit once per test binary, into the build
// directory TestMain removes.
var edgelimitBin = sync.OnceValues(func() (string, error) {
	dir, err := repoRoot()
	if err != nil {
		return "", err
	}
	buildMu.Lock()
	if buildDir == "" {
		buildDir, err = os.MkdirTemp("", "edgelimit-e2e-")
	}
	base := buildDir
	buildMu.Unlock()
	if err != nil {
		return "", err
	}
	out := filepath.Join(base, "cli", "edgelimit")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-o", out, "./cmd/edgelimit")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/edgelimit: %v\n%s", err, b)
	}
	return out, nil
})

func edgelimitPath(t testing.TB) string {
	t.Helper()
	p, err := edgelimitBin()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serveProcess is `edgelimit serve` running as its own process.
type serveProcess struct {
	cmd      *exec.Cmd
	out      *syncBuffer // stdout and stderr, interleaved as written
	stdout   *syncBuffer // stdout alone (with --emf, its metric lines whole)
	done     chan struct{}
	url      string // set once it listens
	exitCode int    // set once done is closed
}

var serveListening = regexp.MustCompile(`listening on (http://[0-9.:]+)`)

// startServeProcess runs `edgelimit serve --addr 127.0.0.1:0 args...` with
// exactly env (plus PATH and a temporary HOME: nothing of the test's
// environment leaks in) and returns once it listens or has exited. It is
// stopped when the test ends.
func startServeProcess(t *testing.T, env map[string]string, args ...string) *serveProcess {
	t.Helper()
	p := &serveProcess{out: &syncBuffer{}, stdout: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(edgelimitPath(t), append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	p.cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "TZ=UTC"}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start edgelimit serve: %v", err)
	}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(io.TeeReader(stdout, io.MultiWriter(p.out, p.stdout)))
		for sc.Scan() {
			if m := serveListening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			}
		}
		_ = p.cmd.Wait() // after the pipe is drained, as Wait wants
		p.exitCode = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(p.stop)
	select {
	case p.url = <-urlc:
	case <-p.done:
	case <-time.After(startTimeout):
		t.Fatalf("edgelimit serve neither listened nor exited within %s:\n%s", startTimeout, p.out)
	}
	return p
}

// stop ends the server and waits for it.
func (p *serveProcess) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// output is everything the process wrote; stop it first for all of it.
func (p *serveProcess) output() string { return p.out.String() }

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestServeLogin runs the demo login (the contact function's POST /login)
// over real HTTP through `edgelimit serve` and its example policies
// (login-failures: 5 failed attempts per 15 minutes per address, only 401
// and 403 charged), in memory and on dynalite: successful logins cost
// nothing, the fifth failure is still answered, and the next attempt is a
// 429 whatever its password.
//
// On dynalite the policy is the example's with store_timeout: 5s: the
// charge after a response is a store call that a loaded machine can make
// miss the 100 ms default, and this test counts every charge (it was red
// under a load average of 25, the fourth failure never charged).
func TestServeLogin(t *testing.T) {
	const loginPolicy = `version: 1
policies:
  - name: login-failures
    routes: ["POST /login"]
    key: ip
    strategy: durable
    limit: 5
    window: 15m
    charge_status: [401, 403]
    on_store_error: deny
    store_timeout: 5s
`
	if !strings.Contains(readFile(t, "cmd/edgelimit/policies.yaml"), strings.TrimSuffix(strings.TrimPrefix(loginPolicy, "version: 1\npolicies:\n"), "    store_timeout: 5s\n")) {
		t.Fatal("the login policy is no longer the example's: update the test's copy")
	}
	for _, store := range []string{"memory", "dynamodb"} {
		t.Run(store, func(t *testing.T) {
			cfg := serveConfig{DynamoDB: store == "dynamodb"}
			if cfg.DynamoDB {
				cfg.Policies = loginPolicy
			}
			s := startServe(t, cfg)
			h := map[string]string{"Content-Type": "application/json"}
			good := `{"username":"demo","password":"correct horse battery staple"}`
			bad := `{"username":"demo","password":"guess"}`
			for i, st := range []struct {
				body   string
				status int
			}{{bad, 401}, {good, 200}, {bad, 401}, {bad, 401}, {good, 200}, {bad, 401}, {bad, 401}, {good, 429}} {
				r := s.do(t, "POST", "/login", h, st.body)
				if r.Status != st.status {
					t.Fatalf("attempt %d: %s, want %d", i+1, r, st.status)
				}
				if st.status == 429 && (!strings.Contains(string(r.Body), `"violated-policies":["login-failures"]`) || r.Header.Get("Retry-After") == "") {
					t.Errorf("attempt %d: %s, want login-failures violated and a Retry-After", i+1, r)
				}
			}
		})
	}
}
