// Command testservers starts the local DynamoDB-API servers the integration
// tests need (dynalite from node_modules, moto_server), runs a command with
// their endpoints in the environment, and stops them however the command
// ends.
//
//	go run ./internal/tools/testservers -- go test -race ./...
//
// In CI (CI=true) a server that cannot start is a failure; elsewhere it is
// a warning and the tests that need it skip.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type server struct {
	name string
	env  string
	argv func(port int) []string
	cmd  *exec.Cmd
	log  *os.File
}

func main() {
	only := flag.String("only", "dynalite,moto", "comma-separated servers to start")
	logDir := flag.String("logs", os.TempDir(), "directory for the servers' logs")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: testservers [-only dynalite,moto] -- COMMAND [ARGS...]")
		os.Exit(2)
	}
	ci := os.Getenv("CI") == "true"
	servers := []*server{
		{name: "dynalite", env: "EDGELIMIT_DYNALITE_ENDPOINT", argv: func(p int) []string {
			return []string{"node_modules/.bin/dynalite", "--host", "127.0.0.1", "--port", fmt.Sprint(p),
				"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"}
		}},
		// moto runs behind a lock (see moto_serialized.py): its DynamoDB
		// backend is not atomic per item under concurrent requests.
		{name: "moto", env: "EDGELIMIT_MOTO_ENDPOINT", argv: func(p int) []string {
			return []string{"python3", motoLauncher(), "127.0.0.1", fmt.Sprint(p)}
		}},
	}
	env := os.Environ()
	var started []*server
	stopAll := func() {
		for _, s := range started {
			stop(s)
		}
	}
	failed := false
	for _, s := range servers {
		if !strings.Contains(","+*only+",", ","+s.name+",") {
			continue
		}
		endpoint, err := start(s, *logDir)
		if err != nil {
			if ci {
				fmt.Fprintf(os.Stderr, "testservers: %s did not start: %v\n", s.name, err)
				failed = true
				continue
			}
			fmt.Fprintf(os.Stderr, "testservers: warning: %s did not start (%v); its tests will skip\n", s.name, err)
			continue
		}
		started = append(started, s)
		env = append(env, s.env+"="+endpoint)
		fmt.Fprintf(os.Stderr, "testservers: %s on %s (log %s)\n", s.name, endpoint, s.log.Name())
	}
	if failed {
		stopAll()
		os.Exit(1)
	}

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		stopAll()
		fmt.Fprintf(os.Stderr, "testservers: %v\n", err)
		os.Exit(1)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var runErr error
	select {
	case runErr = <-done:
	case s := <-sig:
		_ = cmd.Process.Signal(s)
		runErr = <-done
	}
	stopAll()
	var ee *exec.ExitError
	if errors.As(runErr, &ee) {
		os.Exit(ee.ExitCode())
	}
	if runErr != nil {
		fmt.Fprintf(os.Stderr, "testservers: %v\n", runErr)
		os.Exit(1)
	}
}

func start(s *server, logDir string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	argv := s.argv(port)
	if _, err := exec.LookPath(argv[0]); err != nil {
		return "", fmt.Errorf("%s not found (run `make deps`)", argv[0])
	}
	f, err := os.CreateTemp(logDir, "edgelimit-"+s.name+"-*.log")
	if err != nil {
		return "", err
	}
	s.log = f
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return "", err
	}
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if ready(endpoint) {
			return endpoint, nil
		}
		select {
		case <-ctx.Done():
			stop(s)
			return "", fmt.Errorf("no answer on %s within 60s; see %s", endpoint, f.Name())
		case <-time.After(100 * time.Millisecond):
		}
		if s.cmd.ProcessState != nil {
			return "", fmt.Errorf("exited early; see %s", f.Name())
		}
	}
}

// ready reports whether the server answers a DynamoDB request at all (any
// HTTP status means it is listening and parsing requests).
func ready(endpoint string) bool {
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader("{}"))
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	c := http.Client{Timeout: time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

func stop(s *server) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	s.log.Close()
}

// motoLauncher is the path of moto_serialized.py next to this source file,
// found from the working directory (make runs from the repository root).
func motoLauncher() string {
	for _, p := range []string{"internal/tools/testservers/moto_serialized.py", "moto_serialized.py"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "internal/tools/testservers/moto_serialized.py"
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
