package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Bounds of the `make run` test: how long the build and the start may take
// on a loaded machine, and how long the server may take to stop. Neither
// is a timing assertion: a healthy run takes a fraction of either.
const (
	makeRunStartTimeout = 5 * time.Minute
	makeRunStopTimeout  = time.Minute
)

// TestMakeRunStops runs the quick start's `make run` as a user does, on a
// free port, waits until it answers, stops it the ways a user does, and
// checks that nothing listens on the port afterwards.
//
// Regression: `make run` was `go run ./cmd/edgelimit serve`; `kill` of the
// make process made make pass SIGTERM to `go run`, which died without
// passing it on, and left its child serving on the port. And a make killed
// with SIGKILL passes nothing on at all: the server must notice by itself
// that the process that started it is gone (serve --exit-with-parent).
func TestMakeRunStops(t *testing.T) {
	makeBin, err := exec.LookPath("make")
	if err != nil {
		skipOrFail(t, "make is not installed")
	}
	cases := []struct {
		name string
		stop func(makePID int) error
	}{
		// The terminal sends SIGINT to the whole foreground process group.
		{"ctrl-c", func(pid int) error { return syscall.Kill(-pid, syscall.SIGINT) }},
		// `kill PID` of make alone: make passes SIGTERM to its child.
		{"kill make", func(pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }},
		// make cannot pass SIGKILL on: only the server can notice.
		{"kill -9 make", func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }},
	}
	bin := filepath.Join(t.TempDir(), "edgelimit")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			out := &syncBuffer{}
			// RUN_BIN keeps the test's build out of the repository's bin/
			// (where a user's own `make run` may be running).
			cmd := exec.Command(makeBin, "--no-print-directory", "run", "ADDR="+addr, "RUN_BIN="+bin)
			cmd.Dir = root(t)
			// As from a shell: not a sub-make of the `make test` that may be
			// running this test.
			cmd.Env = append(withoutMake(os.Environ()), "GO="+goTool())
			cmd.Stdout, cmd.Stderr = out, out
			// Its own process group, as a shell job has: the group is what
			// Ctrl-C signals, and what the cleanup kills if the test fails.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatalf("start make run: %v", err)
			}
			pid := cmd.Process.Pid
			done := make(chan struct{}) // closed once make has exited
			var waitErr error
			go func() { waitErr = cmd.Wait(); close(done) }()
			t.Cleanup(func() {
				_ = syscall.Kill(-pid, syscall.SIGKILL) // whatever is left of the group
				select {
				case <-done:
				case <-time.After(makeRunStopTimeout):
				}
			})

			start := time.Now()
			if err := waitAnswers(addr, done, makeRunStartTimeout); err != nil {
				if errors.Is(err, errExited) {
					err = fmt.Errorf("%w (%v)", err, waitErr)
				}
				t.Fatalf("make run ADDR=%s: %v\n%s", addr, err, out)
			}
			t.Logf("make run answered on %s after %s", addr, time.Since(start).Round(time.Millisecond))
			stopped := time.Now()
			if err := tc.stop(pid); err != nil {
				t.Fatal(err)
			}
			if err := waitClosed(addr, makeRunStopTimeout); err != nil {
				t.Fatalf("after %s: %v\nmake run's output:\n%s", tc.name, err, out)
			}
			t.Logf("the port closed %s after %s", time.Since(stopped).Round(time.Millisecond), tc.name)
			select {
			case <-done:
			case <-time.After(makeRunStopTimeout):
				t.Fatalf("make did not exit within %s of %s:\n%s", makeRunStopTimeout, tc.name, out)
			}
		})
	}
}

// withoutMake drops what a parent make passes to its sub-makes.
func withoutMake(env []string) []string {
	var out []string
	for _, kv := range env {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
			continue
		}
		out = append(out, kv)
	}
	return out
}

var errExited = errors.New("make exited before the server answered")

// waitAnswers polls addr until an HTTP request gets an answer, or exited is
// closed, or the timeout passes.
func waitAnswers(addr string, exited <-chan struct{}, timeout time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
			client.CloseIdleConnections()
			return nil
		}
		select {
		case <-exited:
			return errExited
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %s: %v", timeout, err)
		}
	}
}

// waitClosed polls addr until a connection is refused, or the timeout passes.
func waitClosed(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				return nil
			}
		} else {
			c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still accepts connections %s later", addr, timeout)
		}
		time.Sleep(100 * time.Millisecond) // a poll interval, not a wait for time to pass
	}
}
