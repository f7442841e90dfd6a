package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

var (
	runLambdaReady    = regexp.MustCompile(`runlambda: \S+ on (http://\S+/invocations)`)
	runLambdaDynalite = regexp.MustCompile(`testservers: dynalite on http://(\S+) `)
)

// TestMakeRunLambda runs the README's "Run the Lambda program locally" as a
// user does: `make run-lambda` starts dynalite, creates the table, and runs
// examples/lambda under the Runtime Interface Emulator; the README's event
// gets the policy's 5 admissions and then a 429; Ctrl-C (SIGINT to the
// process group) or `kill` of make stops the emulator, the function and
// dynalite.
func TestMakeRunLambda(t *testing.T) {
	if _, err := os.Stat(filepath.Join(root(t), "node_modules", ".bin", "dynalite")); err != nil {
		skipOrFail(t, "dynalite is not installed (make deps)")
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		skipOrFail(t, "make is not installed")
	}
	rie(t) // installs the pinned emulator where make's tools target finds it
	event, err := os.ReadFile(filepath.Join(root(t), "examples", "lambda", "event.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, tc := range []struct {
		name string
		stop func(makePID int) error
	}{
		{"ctrl-c", func(pid int) error { return syscall.Kill(-pid, syscall.SIGINT) }},
		{"kill make", func(pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			log := &syncBuffer{}
			// LAMBDA_OUT keeps the test's builds out of the repository's
			// build/ (where a user's own make run-lambda may be running).
			cmd := exec.Command(makeBin, "--no-print-directory", "run-lambda", "LAMBDA_ADDR="+addr, "LAMBDA_OUT="+out)
			cmd.Dir = root(t)
			// A store budget a loaded machine cannot miss: the count is then
			// exact (the program is unchanged; a deployment sets the same).
			cmd.Env = append(withoutMake(os.Environ()), "GO="+goTool(), "EDGELIMIT_OVERRIDES=hello.store_timeout=5s")
			cmd.Stdout, cmd.Stderr = log, log
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			t.Cleanup(func() {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				<-done
			})

			var url, dyn string
			deadline := time.Now().Add(makeRunStartTimeout)
			for url == "" {
				if m := runLambdaReady.FindStringSubmatch(log.String()); m != nil {
					url = m[1]
					break
				}
				select {
				case <-done:
					t.Fatalf("make run-lambda exited:\n%s", log)
				case <-time.After(100 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("make run-lambda did not start within %s:\n%s", makeRunStartTimeout, log)
				}
			}
			if m := runLambdaDynalite.FindStringSubmatch(log.String()); m != nil {
				dyn = m[1]
			} else {
				t.Fatalf("no dynalite in the output:\n%s", log)
			}

			// Admitted until the limit, then refused.
			for i := 1; i <= 6; i++ {
				resp := invokeRunLambda(t, url, event)
				if i <= 5 {
					if resp.StatusCode != 200 || resp.Body != "hello\n" || !strings.HasPrefix(resp.Headers["RateLimit"], fmt.Sprintf(`"hello";r=%d;t=`, 5-i)) {
						t.Errorf("invocation %d: %d %q %v, want 200 hello, r=%d", i, resp.StatusCode, resp.Body, resp.Headers, 5-i)
					}
					continue
				}
				if rl := resp.Headers["RateLimit"]; resp.StatusCode != 429 || !strings.HasPrefix(rl, `"hello";r=0;t=`) || resp.Headers["RateLimit-Policy"] != `"hello";q=5;w=60` {
					t.Errorf("invocation 6: %d, RateLimit %q, RateLimit-Policy %q; want the 429", resp.StatusCode, rl, resp.Headers["RateLimit-Policy"])
				}
			}
			// The function's log and metric lines, as Lambda would keep them.
			if !strings.Contains(log.String(), `"_aws":{`) || !strings.Contains(log.String(), `"Policy":"hello"`) {
				t.Errorf("no metric line of the policy in the output:\n%s", log)
			}

			if err := tc.stop(pid); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(makeRunStopTimeout):
				t.Fatalf("make did not exit within %s of %s:\n%s", makeRunStopTimeout, tc.name, log)
			}
			for what, a := range map[string]string{"the emulator": strings.TrimPrefix(strings.Split(url, "/2015")[0], "http://"), "dynalite": dyn} {
				if err := waitClosed(a, makeRunStopTimeout); err != nil {
					t.Errorf("%s after %s: %v", what, tc.name, err)
				}
			}
			if left := processesOf(filepath.Join(out, "lambda", "bootstrap")); len(left) > 0 {
				t.Errorf("after %s the function still runs: pids %v", tc.name, left)
			}
		})
	}
}

func invokeRunLambda(t *testing.T, url string, event []byte) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(event))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("invoke: %d %s (%v)", resp.StatusCode, b, err)
	}
	return out
}

// processesOf returns the pids whose executable is path.
func processesOf(path string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		if exe, err := os.Readlink(p); err == nil && exe == path {
			out = append(out, strings.Split(p, "/")[2])
		}
	}
	return out
}
