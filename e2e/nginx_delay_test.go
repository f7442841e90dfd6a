package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// nginx's limit_req without nodelay and edgelimit's max_delay, side by
// side. Without nodelay nginx delays each excessive request by its excess
// (ngx_http_limit_req_account: excess * 1000 / rate milliseconds, the
// excess counted when the request came, before it waits) and refuses one
// whose excess would pass the burst: the requests beyond the rate queue up
// to the burst and are served at the rate. edgelimit's gcra with burst 1
// and max_delay B*T reserves each request's turn when it comes and holds
// it until then, B turns at most:
//
//	nginx `rate=R burst=B` (no nodelay)  ==  edgelimit gcra `burst: 1, max_delay: B/R`
//
// The rate here is one a second, so a request is "delayed" when its answer
// takes more than delayedAfter, far from both the ~1 ms of one served at
// once and the 500 ms of the shortest turn; each phase is sent to both
// servers at the same time, so a loaded machine slows both alike.

// delayedAfter tells a delayed answer from one served at once.
const delayedAfter = 250 * time.Millisecond

// fate is what became of one request: served at once, served after a
// wait, or refused.
type fate byte

const (
	atOnce  fate = '0'
	waited  fate = 'w'
	refused fate = 'x'
)

// sendAt sends GET url at each offset from start (concurrently: a
// request does not wait for the one before it), or one after another when
// offsets is nil and n > 0, and returns each request's fate in order.
func sendAt(t *testing.T, client *http.Client, url string, offsets []time.Duration, n int) []fate {
	t.Helper()
	one := func() (fate, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(t0)
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			return refused, nil
		case resp.StatusCode != http.StatusOK:
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		case took >= delayedAfter:
			return waited, nil
		}
		return atOnce, nil
	}
	if offsets == nil {
		out := make([]fate, n)
		for i := range n {
			f, err := one()
			if err != nil {
				t.Errorf("%s: request %d: %v", url, i, err)
			}
			out[i] = f
		}
		return out
	}
	out := make([]fate, len(offsets))
	start := time.Now()
	var wg sync.WaitGroup
	for i, off := range offsets {
		<-time.After(time.Until(start.Add(off))) // the arrival schedule being compared, not a wait for a result
		wg.Go(func() {
			f, err := one()
			if err != nil {
				t.Errorf("%s: request %d: %v", url, i, err)
			}
			out[i] = f
		})
	}
	wg.Wait()
	return out
}

func count(fs []fate, f fate) int { return strings.Count(string(fs), string(f)) }

// TestNginxDelayIsEdgelimitMaxDelay sends three arrival schedules to a
// real nginx (`limit_req zone=... burst=3`, rate=1r/s, no nodelay) and to
// a real `edgelimit serve` (durable gcra, 1 per 1s, burst 1, max_delay
// 3s, and a kv bucket of the same numbers), all at once, and requires each
// phase's served-at-once, delayed and refused counts of each within one
// request of nginx's, request by request where the order of arrival is
// fixed.
func TestNginxDelayIsEdgelimitMaxDelay(t *testing.T) {
	const burst = 3
	phases := []struct {
		name    string
		offsets []time.Duration // nil: one after another
		n       int
		ordered bool // the fates can be compared request by request
	}{
		// Six at once: one served, three queued, two refused.
		{name: "at-once", offsets: make([]time.Duration, burst+3)},
		// One after another: each waits for the one before, so each is
		// delayed about one interval and none is refused.
		{name: "one-after-another", n: burst + 2, ordered: true},
		// Twice the rate: the queue grows by half a turn a request until
		// it is full.
		{name: "twice-the-rate", offsets: func() []time.Duration {
			var o []time.Duration
			for i := range 9 {
				o = append(o, time.Duration(i)*500*time.Millisecond)
			}
			return o
		}(), ordered: true},
	}
	locations := map[string]string{}
	var pol strings.Builder
	pol.WriteString("version: 1\npolicies:\n")
	for i, ph := range phases {
		locations["/nginx/"+ph.name] = fmt.Sprintf("burst=%d", burst)
		fmt.Fprintf(&pol, "  - name: p%d\n    routes: [\"GET /edgelimit/%s\"]\n    key: ip\n    strategy: durable\n    algorithm: gcra\n"+
			"    limit: 1\n    window: 1s\n    burst: 1\n    max_delay: %ds\n", i, ph.name, burst)
		// The same bucket on kv: one instance alone holds the whole
		// bucket, so its turns are nginx's too.
		fmt.Fprintf(&pol, "  - name: k%d\n    routes: [\"GET /kv/%s\"]\n    key: ip\n    strategy: kv\n"+
			"    limit: 1\n    window: 1s\n    burst: 1\n    max_delay: %ds\n", i, ph.name, burst)
	}
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, []byte(pol.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ngx := startNginxRate(t, "1r/s", locations)
	el := startServeProcess(t, nil, "--policies", file)
	if el.url == "" {
		t.Fatalf("edgelimit serve did not start:\n%s", el.output())
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()

	for _, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			t.Parallel() // each phase has its own zone and policy
			var gotNginx, gotDurable, gotKV []fate
			var wg sync.WaitGroup
			wg.Go(func() { gotNginx = sendAt(t, client, ngx.url+"/nginx/"+ph.name, ph.offsets, ph.n) })
			wg.Go(func() { gotDurable = sendAt(t, client, el.url+"/edgelimit/"+ph.name, ph.offsets, ph.n) })
			wg.Go(func() { gotKV = sendAt(t, client, el.url+"/kv/"+ph.name, ph.offsets, ph.n) })
			wg.Wait()
			t.Logf("nginx %s, durable %s, kv %s (0 at once, w waited, x refused)", string(gotNginx), string(gotDurable), string(gotKV))
			for _, edge := range []struct {
				name string
				got  []fate
			}{{"durable", gotDurable}, {"kv", gotKV}} {
				t.Run(edge.name, func(t *testing.T) { compareFates(t, gotNginx, edge.got, ph.ordered) })
			}
		})
	}
}

// compareFates requires gotEdge's served-at-once, delayed and refused
// counts within one request of gotNginx's, and with ordered at every point
// of the schedule.
func compareFates(t *testing.T, gotNginx, gotEdge []fate, ordered bool) {
	for _, f := range []fate{atOnce, waited, refused} {
		if d := count(gotEdge, f) - count(gotNginx, f); d < -1 || d > 1 {
			t.Errorf("%q: edgelimit %d, nginx %d: more than one request apart", f, count(gotEdge, f), count(gotNginx, f))
		}
	}
	if ordered {
		// Request by request, within one at every point of the
		// schedule: after each request, each fate's count so far
		// differs by at most one (a request at a refill instant may
		// land on either side of it: two neighbours swapped).
		for i := range min(len(gotNginx), len(gotEdge)) {
			for _, f := range []fate{atOnce, waited, refused} {
				if d := count(gotEdge[:i+1], f) - count(gotNginx[:i+1], f); d < -1 || d > 1 {
					t.Errorf("after request %d, %q: edgelimit %d, nginx %d (nginx %s, edgelimit %s): more than one request apart",
						i+1, f, count(gotEdge[:i+1], f), count(gotNginx[:i+1], f), string(gotNginx), string(gotEdge))
				}
			}
		}
	}
}
