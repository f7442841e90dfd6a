package e2e

import (
	"cmp"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/internal/faultproxy"
)

// floodPolicy is a durable gcra policy on GET /flood that decides locally
// while its store fails, as the search function's does: a burst of 20
// that refills too slowly for a test to see it (10 an hour); its budget is
// generous (a loaded machine must not open the breaker by itself), its
// breaker's cool-down the test's.
func floodPolicy(coolDown string) string {
	return `version: 1
policies:
  - name: flood
    routes: ["GET /flood"]
    key: header:X-Client
    strategy: durable
    algorithm: gcra
    limit: 10
    window: 1h
    burst: 20
    on_store_error: local
    store_timeout: 1s
    store_breaker: {failures: 5, cool_down: ` + coolDown + `}
`
}

// serveBehindProxy runs `edgelimit serve` on a fresh dynalite table behind
// a fault-injecting proxy.
func serveBehindProxy(t *testing.T, policies string) (*serveProcess, *faultproxy.Proxy) {
	t.Helper()
	endpoint, table := dynalite(t)
	proxy, err := faultproxy.New(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServeProcess(t, map[string]string{"EDGELIMIT_HASH_KEY": randomKey()},
		"--store", "dynamodb", "--dynamodb-endpoint", proxy.URL(), "--table", table, "--policies", file, "--log-format", "json")
	if p.url == "" {
		t.Fatalf("edgelimit serve exited (%d):\n%s", p.exitCode, p.output())
	}
	return p, proxy
}

// flood sends n requests to url from workers goroutines and returns the
// statuses it got, by status. The requests are from one client (X-Client:
// client), or each from its own when client is "".
func flood(t *testing.T, url, client string, n, workers int) map[int]int {
	t.Helper()
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range workers {
		wg.Go(func() {
			for i := range next {
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("X-Client", cmp.Or(client, fmt.Sprintf("client-%d", i)))
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				got[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return got
}

// TestServeBreakerStopsAskingAHungStore (issue "when the store fails, fail
// fast", item 1: a hung store taxed every request with the whole budget,
// one store call per request for as long as it hung): over HTTP, 400
// clients over 16 connections at once, the store hangs (each client new,
// so that no deny cache spares the store a call); the calls in flight when
// the fifth one in a row fails are the last the store sees, and every
// request is answered by the in-process twin, never a 5xx. (The cool-down
// is longer than the test, so that no probe is counted; recovery is
// TestServeBreakerRecovers.)
func TestServeBreakerStopsAskingAHungStore(t *testing.T) {
	p, proxy := serveBehindProxy(t, floodPolicy("10m"))
	url := p.url + "/flood"
	if got := flood(t, url, "first", 40, 1); got[200] != 20 || got[429] != 20 {
		t.Fatalf("store up: statuses %v, want the burst of 20 admitted and 20 refused", got)
	}
	proxy.Set(faultproxy.Hang)
	before := proxy.Requests()
	const workers = 16
	got := flood(t, url, "", 400, workers)
	if got[200] != 400 {
		t.Errorf("store hung: statuses %v, want 400 admissions (each client's first, decided locally)", got)
	}
	// Five failures in a row open it; the other calls in flight then had
	// started already.
	if calls := proxy.Requests() - before; calls > 5+workers-1 {
		t.Errorf("%d store calls for 400 requests while the store hung, want at most %d", calls, 5+workers-1)
	}
	if out := p.output(); !strings.Contains(out, "edgelimit: store breaker open") {
		t.Errorf("no breaker log line:\n%s", out)
	}
}

// TestServeBreakerRecovers: once the store is back, the first probe after
// the cool-down closes the breaker and the store counts again.
func TestServeBreakerRecovers(t *testing.T) {
	p, proxy := serveBehindProxy(t, floodPolicy("100ms"))
	url := p.url + "/flood"
	proxy.Set(faultproxy.Hang)
	for !strings.Contains(p.output(), "edgelimit: store breaker open") {
		flood(t, url, "", 8, 8)
	}
	proxy.Set(faultproxy.Pass)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(p.output(), "edgelimit: store breaker closed") {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker did not close within a minute of the store's return:\n%s", p.output())
		}
		flood(t, url, "", 1, 1)
	}
	if proxy.Forwarded() == 0 {
		t.Error("closed, but no call reached the store")
	}
}
