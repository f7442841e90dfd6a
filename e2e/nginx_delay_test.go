package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/metrics"
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
// The rate here is one a second. What became of each request is what the
// server says it did, never how long the answer took (a loaded machine
// makes an answer served at once slow): nginx's $limit_req_status, in the
// header X-Limit-Req of every answer (startNginxRate), and edgelimit's
// metric line of the request's decision (serve --emf), found by the
// request id the demo echo answers with and carrying Delayed 1 when the
// request waited for its turn. Each request of a phase is sent to both
// servers at the same instant.

// fate is what became of one request: served at once, served after a
// wait, or refused.
type fate byte

const (
	atOnce  fate = '0'
	waited  fate = 'w'
	refused fate = 'x'
)

// answer is what a request got: its status, nginx's X-Limit-Req, and the
// request id of edgelimit's demo echo.
type answer struct {
	status    int
	limitReq  string
	requestID string
}

// sendAt sends GET to each of urls at each offset from start, the same
// instant for all of them (concurrently: a request does not wait for the
// one before it), or to each one after another when offsets is nil and
// n > 0, and returns each url's answers in order.
func sendAt(t *testing.T, client *http.Client, urls []string, offsets []time.Duration, n int) [][]answer {
	t.Helper()
	one := func(url string) (answer, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return answer{}, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return answer{}, err
		}
		a := answer{status: resp.StatusCode, limitReq: resp.Header.Get("X-Limit-Req")}
		if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			var echo struct {
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal(body, &echo); err != nil {
				return a, fmt.Errorf("demo echo %q: %v", body, err)
			}
			a.requestID = echo.RequestID
		}
		return a, nil
	}
	send := func(out [][]answer, u, i int) {
		a, err := one(urls[u])
		if err != nil {
			t.Errorf("%s: request %d: %v", urls[u], i, err)
		}
		out[u][i] = a
	}
	out := make([][]answer, len(urls))
	var wg sync.WaitGroup
	if offsets == nil {
		for u := range urls {
			out[u] = make([]answer, n)
			wg.Go(func() {
				for i := range n {
					send(out, u, i)
				}
			})
		}
		wg.Wait()
		return out
	}
	for u := range urls {
		out[u] = make([]answer, len(offsets))
	}
	start := time.Now()
	for i, off := range offsets {
		<-time.After(time.Until(start.Add(off))) // the arrival schedule being compared, not a wait for a result
		for u := range urls {
			wg.Go(func() { send(out, u, i) })
		}
	}
	wg.Wait()
	return out
}

// nginxFates reads each answer's fate from nginx's $limit_req_status.
func nginxFates(t *testing.T, as []answer) []fate {
	t.Helper()
	out := make([]fate, len(as))
	for i, a := range as {
		switch {
		case a.status == http.StatusOK && a.limitReq == "PASSED":
			out[i] = atOnce
		case a.status == http.StatusOK && a.limitReq == "DELAYED":
			out[i] = waited
		case a.status == http.StatusTooManyRequests && a.limitReq == "REJECTED":
			out[i] = refused
		default:
			t.Errorf("nginx: request %d: status %d, X-Limit-Req %q", i, a.status, a.limitReq)
		}
	}
	return out
}

// decisionLines maps each request id to the EMF line of its decision, in
// the output of `edgelimit serve --emf`.
func decisionLines(stdout string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, m := range jsonLines(stdout) {
		if id, ok := m[metrics.PropertyRequestID].(string); ok && m["_aws"] != nil {
			out[id] = m
		}
	}
	return out
}

// edgeFates reads each answer's fate from its status and, for one served,
// the Delayed metric of policy's line for its request.
func edgeFates(t *testing.T, as []answer, lines map[string]map[string]any, policy string) []fate {
	t.Helper()
	out := make([]fate, len(as))
	for i, a := range as {
		switch a.status {
		case http.StatusTooManyRequests:
			out[i] = refused
		case http.StatusOK:
			l, ok := lines[a.requestID]
			switch {
			case !ok || l[metrics.DimensionPolicy] != policy || l[metrics.MetricAllowed] != 1.0:
				t.Errorf("%s: request %d (%q): no line of an admission: %v", policy, i, a.requestID, l)
			case l[metrics.MetricDelayed] == 1.0:
				out[i] = waited
			default:
				out[i] = atOnce
			}
		default:
			t.Errorf("%s: request %d: status %d", policy, i, a.status)
		}
	}
	return out
}

func count(fs []fate, f fate) int { return strings.Count(string(fs), string(f)) }

// TestNginxDelayIsEdgelimitMaxDelay sends three arrival schedules to a
// real nginx (`limit_req zone=... burst=3`, rate=1r/s, no nodelay) and to
// a real `edgelimit serve` (durable gcra, 1 per 1s, burst 1, max_delay
// 3s, and a kv bucket of the same numbers), all at once, and requires each
// phase's served-at-once, delayed and refused counts of each within one
// request of nginx's, request by request where the order of arrival is
// fixed: each request's fate as its server reports it, however long its
// answer took.
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
	el := startServeProcess(t, nil, "--policies", file, "--emf")
	if el.url == "" {
		t.Fatalf("edgelimit serve did not start:\n%s", el.output())
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()

	// Every phase at once (each has its own zone and policies).
	got := make([][][]answer, len(phases)) // nginx's, durable's, kv's
	var wg sync.WaitGroup
	for i, ph := range phases {
		urls := []string{ngx.url + "/nginx/" + ph.name, el.url + "/edgelimit/" + ph.name, el.url + "/kv/" + ph.name}
		wg.Go(func() { got[i] = sendAt(t, client, urls, ph.offsets, ph.n) })
	}
	wg.Wait()
	el.stop() // its output is complete once it has exited: every decision's line
	lines := decisionLines(el.stdout.String())

	for i, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			gotNginx := nginxFates(t, got[i][0])
			gotDurable := edgeFates(t, got[i][1], lines, fmt.Sprintf("p%d", i))
			gotKV := edgeFates(t, got[i][2], lines, fmt.Sprintf("k%d", i))
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
