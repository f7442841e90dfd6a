package e2e

import (
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// kvPolicyFile is one kv policy on GET /kv: a bucket of 8 refilling 8 a
// minute, per client address. A store failure is a 503 (on_store_error:
// deny), so that a slow store on a loaded machine shows up as a failure,
// never as an admission; and the store's budget is generous for the same
// reason: these tests count what the algorithm admits.
const kvPolicyFile = `version: 1
policies:
  - name: kv
    routes: ["GET /kv"]
    key: ip
    strategy: kv
    limit: 8
    window: 1m
    burst: 8
    on_store_error: deny
    store_timeout: 5s
`

// kvProcesses starts n `edgelimit serve --store dynamodb` processes on one
// fresh dynalite table, all hashing client keys with one EDGELIMIT_HASH_KEY
// (so that one client is one key in all of them).
func kvProcesses(t *testing.T, n int) []*serveProcess {
	t.Helper()
	endpoint, table := dynalite(t)
	policies := filepath.Join(t.TempDir(), "kv.yaml")
	if err := os.WriteFile(policies, []byte(kvPolicyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"EDGELIMIT_HASH_KEY": base64.StdEncoding.EncodeToString([]byte("e2e-kv-processes-hash-key-0123456789"))}
	var procs []*serveProcess
	for range n {
		p := startServeProcess(t, env, "--store", "dynamodb", "--dynamodb-endpoint", endpoint, "--table", table, "--policies", policies)
		if p.url == "" {
			t.Fatalf("edgelimit serve exited (%d):\n%s", p.exitCode, p.output())
		}
		procs = append(procs, p)
	}
	return procs
}

// kvSend sends GET /kv to procs round-robin, from concurrent goroutines
// (all at once when gap is 0, else one every gap), and counts the answers.
func kvSend(t *testing.T, procs []*serveProcess, requests int, gap time.Duration) (admitted, denied int64) {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	var ok, no, other atomic.Int64
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range requests {
		u := procs[i%len(procs)].url + "/kv"
		wg.Go(func() {
			<-gate
			resp, err := hc.Get(u)
			if err != nil {
				other.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				ok.Add(1)
			case http.StatusTooManyRequests:
				no.Add(1)
			default:
				other.Add(1)
			}
		})
		if gap > 0 {
			if i == 0 {
				close(gate)
			}
			time.Sleep(gap)
		}
	}
	if gap == 0 {
		close(gate)
	}
	wg.Wait()
	if other.Load() != 0 {
		t.Fatalf("%d of %d requests failed (neither 200 nor 429)", other.Load(), requests)
	}
	return ok.Load(), no.Load()
}

// TestKVSeparateProcessesShareOneBucket pins issue #14 with real, separate
// `edgelimit serve` processes sharing one dynalite table: a concurrent
// burst over 4 processes used to admit each process's own view of the
// bucket (up to 4× the burst here; 16× over 16 processes), because each
// decided from its own copy and the table kept the last blind write. Now
// spending adds up in the table and a key's first sync interval in a
// process reserves every admission there: the burst admits the bucket, at
// most 2× it (the ceiling, kept as the assertion's margin for a
// loaded machine); a steady trickle after it for 3 seconds adds at most
// what the bucket refills and one more bucket (the proven bound's excess).
func TestKVSeparateProcessesShareOneBucket(t *testing.T) {
	procs := kvProcesses(t, 4)
	start := time.Now()
	admitted, _ := kvSend(t, procs, 40, 0)
	t.Logf("concurrent burst of 40 over 4 processes: %d admitted (bucket 8)", admitted)
	if admitted > 16 {
		t.Errorf("a concurrent burst over 4 processes admitted %d, more than 2× the bucket of 8", admitted)
	}
	if admitted < 1 {
		t.Errorf("a concurrent burst admitted nothing")
	}
	more, _ := kvSend(t, procs, 60, 50*time.Millisecond)
	refill := int64(8 * time.Since(start).Minutes())
	t.Logf("then 60 over 3s: %d admitted (refill in that time: %d)", more, refill)
	if total := admitted + more; total > 2*8+refill+1 {
		t.Errorf("burst and trickle admitted %d in all, beyond 2 buckets and the refill (%d)", total, 2*8+refill+1)
	}
}

// TestKVOneProcessIsExact: one process, alone on its table, is exactly the
// bucket: a concurrent burst of 20 gets 8, however its requests interleave,
// and a trickle after it (past the key's first sync interval, decided from
// the process's cache) gets exactly what the bucket refilled meanwhile.
func TestKVOneProcessIsExact(t *testing.T) {
	procs := kvProcesses(t, 1)
	start := time.Now()
	if admitted, denied := kvSend(t, procs, 20, 0); admitted != 8 || denied != 12 {
		t.Errorf("one process, a burst of 20 on a bucket of 8: %d admitted, %d denied; want 8 and 12", admitted, denied)
	}
	before := int64(8 * time.Since(start).Minutes())
	more, _ := kvSend(t, procs, 20, 100*time.Millisecond)
	after := int64(8 * time.Since(start).Minutes())
	if more < before || more > after {
		t.Errorf("a trickle of 20 after the burst: %d admitted, want what the bucket refilled (%d to %d)", more, before, after)
	}
}
