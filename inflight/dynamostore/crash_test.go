package dynamostore_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/inflight/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// envCrashHolder makes the test binary the crashing holder of
// TestCrashedHolder: "endpoint table".
const envCrashHolder = "INFLIGHT_CRASH_HOLDER"

const crashLease = time.Minute

// crashLimit is the crash test's limit, crashUnits what the crashing
// holder takes of it: a request of several units.
const crashLimit, crashUnits = 4, 3

func crashLimiter(t *testing.T, store inflight.Store, now func() time.Time) *inflight.Limiter {
	t.Helper()
	lim, err := inflight.New(inflight.Config{
		Policy: &policy.Policy{Name: "speech", Strategy: inflight.Strategy, Limit: crashLimit, Window: crashLease},
		Store:  store, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestCrashHolderProcess is the other process of TestCrashedHolder: it
// takes 3 of the 4 slots at T0 in one request, says so, and waits to be
// killed. Run on its own, it does nothing.
func TestCrashHolderProcess(t *testing.T) {
	spec := os.Getenv(envCrashHolder)
	if spec == "" {
		t.Skip("run by TestCrashedHolder")
	}
	endpoint, table, _ := strings.Cut(spec, " ")
	client, _ := ddbtest.Client(t, ddbtest.Server{Name: "parent's", Endpoint: endpoint})
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	lim := crashLimiter(t, store, func() time.Time { return t0 })
	d, err := lim.Allow(context.Background(), edgelimit.Request{Key: "user-1", Cost: crashUnits})
	if err != nil || !d.Allowed {
		fmt.Printf("failed: %+v %v\n", d, err)
		os.Exit(1)
	}
	fmt.Println("taken")
	_, _ = io.ReadAll(os.Stdin) // until killed (or the parent goes away)
	os.Exit(0)
}

// TestCrashedHolder: a process takes 3 of the 4 slots of a key in one
// request and is killed (SIGKILL) before it can release them, as a Lambda
// instance that dies mid-request. All 3 stay taken until the lease ends,
// and all 3 are free from that instant on.
func TestCrashedHolder(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		client, table, _ := ddbtest.Table(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashHolderProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), envCrashHolder+"="+s.Endpoint+" "+table)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if strings.TrimSpace(line) != "taken" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("holder process said %q (%v), want \"taken\"", line, err)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		werr := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("holder process ended with %v, want killed by SIGKILL", werr)
		}

		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		clock := limitertest.NewClock(t0)
		lim := crashLimiter(t, store, clock.Now)
		r := edgelimit.Request{Key: "user-1", Cost: 2}
		for _, at := range []time.Duration{0, crashLease / 2, crashLease - time.Millisecond, crashLease - time.Nanosecond} {
			clock.Set(t0.Add(at))
			d, err := lim.Allow(ctx, r)
			if err != nil || d.Allowed || d.Remaining != crashLimit-crashUnits {
				t.Fatalf("at T0+%s, the dead holder's lease running: a take of 2: %+v, %v; want denied, 1 free", at, d, err)
			}
			if want := min(inflight.DefaultRetryAfter, crashLease-at); d.RetryAfter != want {
				t.Errorf("at T0+%s: RetryAfter %s, want %s", at, d.RetryAfter, want)
			}
		}
		clock.Set(t0.Add(crashLease))
		all := edgelimit.Request{Key: "user-1", Cost: crashLimit}
		d, err := lim.Allow(ctx, all)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("as the dead holder's lease ends: a take of all 4: %+v, %v; want allowed", d, err)
		}
		if d2, err := lim.Allow(ctx, edgelimit.Request{Key: "user-1"}); err != nil || d2.Allowed {
			t.Fatalf("after the slots came back and were taken: %+v, %v; want denied", d2, err)
		}
	})
}
