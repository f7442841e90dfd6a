// Command storefail measures what a store that stops answering costs
// `edgelimit serve`, two builds side by side in one run (`make
// bench-storefail`: the code before the store breaker and the working
// tree's), with the working tree on its memory store as the reference.
// Each build serves one durable gcra policy with on_store_error: local and
// store_timeout: 50ms on dynalite, behind a fault-injecting proxy
// (internal/faultproxy); one client floods one key (-flood-rate over 64
// connections, each waiting for its answer), and a probe client sends
// -probe-rate requests a second, each with a key of its own (so that no
// deny cache answers it). After a warm-up the store hangs for -hang, then
// comes back for -after.
//
// It reports, per build: the store calls per request while the store
// hangs (after its first second), the flood's and the probes' latency
// then, and once the store is back, how many probes were still decided
// without it and how long until every probe was counted by the store
// again. A probe is counted by the store when the proxy passed on a call
// with its key (the proxy reads the hashed key in the request) and the
// store answered it.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgelimit/edgelimit/internal/faultproxy"
	"github.com/edgelimit/edgelimit/internal/keyhash"
)

const policyTemplate = `version: 1
policies:
  - name: m
    routes: ["GET /m"]
    key: header:X-Client
    strategy: durable
    algorithm: gcra
    limit: 10
    window: 1s
    burst: 20
    on_store_error: local
    store_timeout: %s
`

// secret is the servers' EDGELIMIT_HASH_KEY, so that the probes' hashed
// keys can be found in what the proxy sees.
var secret = bytes.Repeat([]byte("storefail-bench-"), 2)

type options struct {
	old, new, oldLabel, newLabel string
	dynalite, dynaliteBin        string
	warm, hang, after            time.Duration
	conns, probeRate, floodRate  int
	out                          string
	storeTimeout                 string
}

// Result is one build's figures.
type Result struct {
	Label string
	// While the store hangs, after its first second.
	HangRequests    int
	HangStoreCalls  int
	CallsPerRequest float64
	FloodP50ms      float64
	FloodP95ms      float64
	ProbeP50ms      float64
	FloodPerSecond  float64
	// Once the store is back.
	AfterProbes    int
	AfterUncounted int
	RecoveryMs     float64 // from the store's return to the first probe from which on every probe was counted
	FirstCountedMs float64
	// StoreP50ms and StoreP90ms are how long dynalite took to answer the
	// calls passed on after it was back (the proxy's view).
	StoreP50ms, StoreP90ms float64
	// WarmStoreP50ms is the same before the store hung.
	WarmStoreP50ms float64
	// Reopened is how often the store breaker opened again after the
	// store was back (from the server's log; the build before it has none).
	Reopened         int
	ServerErrors     int // 5xx answers over the whole run
	DynaliteRequests int64
	Memory           bool
}

func main() {
	var o options
	flag.StringVar(&o.old, "old", "", "edgelimit binary before (required)")
	flag.StringVar(&o.new, "new", "", "edgelimit binary after (required)")
	flag.StringVar(&o.oldLabel, "old-label", "before", "label of -old")
	flag.StringVar(&o.newLabel, "new-label", "after", "label of -new")
	flag.StringVar(&o.dynalite, "dynalite", os.Getenv("EDGELIMIT_DYNALITE_ENDPOINT"), "dynalite endpoint, when -dynalite-bin is empty")
	flag.StringVar(&o.dynaliteBin, "dynalite-bin", "node_modules/.bin/dynalite",
		"dynalite to start afresh for each build (so that what one build left it doing cannot slow the next); empty: use -dynalite")
	flag.DurationVar(&o.warm, "warm", 3*time.Second, "store up before it hangs")
	flag.DurationVar(&o.hang, "hang", 8*time.Second, "how long the store hangs")
	flag.DurationVar(&o.after, "after", 6*time.Second, "store back, measured")
	flag.IntVar(&o.conns, "conns", 64, "the flood's connections")
	flag.IntVar(&o.floodRate, "flood-rate", 2000, "the flood's requests per second, spread over its connections (each waits for its answer: a slow answer slows the flood)")
	flag.IntVar(&o.probeRate, "probe-rate", 10, "probe requests per second, each its own key")
	flag.StringVar(&o.out, "out", "bench/out/storefail.json", "JSON results")
	flag.StringVar(&o.storeTimeout, "store-timeout", "50ms", "the policy's store_timeout")
	flag.Parse()
	if o.old == "" || o.new == "" || o.dynalite == "" && o.dynaliteBin == "" {
		fmt.Fprintln(os.Stderr, "usage: storefail -old BIN -new BIN [-dynalite-bin node_modules/.bin/dynalite | -dynalite URL]")
		os.Exit(2)
	}
	var results []Result
	for _, b := range []struct {
		bin, label string
		memory     bool
	}{{o.old, o.oldLabel, false}, {o.new, o.newLabel, false}, {o.new, o.newLabel + ", memory store (no store to fail: the reference)", true}} {
		r, err := measure(o, b.bin, b.label, b.memory)
		if err != nil {
			fmt.Fprintln(os.Stderr, "storefail:", err)
			os.Exit(1)
		}
		results = append(results, r)
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err == nil {
		b, _ := json.MarshalIndent(results, "", "  ")
		_ = os.WriteFile(o.out, b, 0o644)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("store_timeout %s; the store hangs %s under a flood of one key (%d/s over %d connections) and %d probes/s of fresh keys; then back for %s; load average %s\n\n",
		o.storeTimeout, o.hang, o.floodRate, o.conns, o.probeRate, o.after, strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Println("| build | store calls per request (hang, after 1 s) | flood p50 / p95 (hang) | probe p50 (hang) | probes not counted by the store after it is back | every probe counted again after | store's own p50 / p90 once back (before it hung) | breaker opened again once back |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		if r.Memory {
			fmt.Printf("| %s | — | %.2f / %.2f ms | %.2f ms | — | — | — | — |\n", r.Label, r.FloodP50ms, r.FloodP95ms, r.ProbeP50ms)
			continue
		}
		recovery := fmt.Sprintf("%.0f ms", r.RecoveryMs)
		if r.AfterUncounted > 0 && r.RecoveryMs >= ms(o.after) {
			recovery = "not within " + o.after.String()
		}
		fmt.Printf("| %s | %.3f (%d of %d) | %.2f / %.2f ms | %.2f ms | %d of %d | %s | %.1f / %.1f ms (%.1f ms) | %d |\n", r.Label, r.CallsPerRequest,
			r.HangStoreCalls, r.HangRequests, r.FloodP50ms, r.FloodP95ms, r.ProbeP50ms, r.AfterUncounted, r.AfterProbes, recovery,
			r.StoreP50ms, r.StoreP90ms, r.WarmStoreP50ms, r.Reopened)
	}
}

type sample struct {
	at     time.Time
	lat    time.Duration
	status int
	key    string // probes only
}

// startDynalite starts a fresh dynalite on a free port and returns its
// endpoint and how to stop it.
func startDynalite(bin string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("dynalite did not listen on %s", addr)
}

func measure(o options, bin, label string, memory bool) (Result, error) {
	endpoint := o.dynalite
	if o.dynaliteBin != "" {
		ep, stop, err := startDynalite(o.dynaliteBin)
		if err != nil {
			return Result{}, err
		}
		defer stop()
		endpoint = ep
	}
	proxy, err := faultproxy.New(endpoint)
	if err != nil {
		return Result{}, err
	}
	defer proxy.Close()
	var seenMu sync.Mutex
	var seen []faultproxy.Seen
	proxy.Inspect(func(s faultproxy.Seen) {
		seenMu.Lock()
		seen = append(seen, s)
		seenMu.Unlock()
	})
	dir, err := os.MkdirTemp("", "storefail")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(policyTemplate, o.storeTimeout)), 0o644); err != nil {
		return Result{}, err
	}
	table := fmt.Sprintf("storefail-%d", time.Now().UnixNano())
	args := []string{"serve", "--addr", "127.0.0.1:0", "--store", "dynamodb", "--dynamodb-endpoint", proxy.URL(),
		"--table", table, "--create-table", "--policies", file}
	if memory {
		args = []string{"serve", "--addr", "127.0.0.1:0", "--store", "memory", "--policies", file}
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "EDGELIMIT_HASH_KEY=" + base64.StdEncoding.EncodeToString(secret)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	logf, _ := os.Create(filepath.Join(os.TempDir(), "storefail-"+label+".log"))
	defer logf.Close()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
	url, err := listening(stdout)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", label, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	fmt.Fprintf(os.Stderr, "%s: %s on %s\n", label, bin, url)

	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: o.conns + 8}}
	get := func(key string) (int, time.Duration) {
		req, _ := http.NewRequest("GET", url+"/m", nil)
		req.Header.Set("X-Client", key)
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, time.Since(t0)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(t0)
	}
	start := time.Now()
	hangAt, backAt := start.Add(o.warm), start.Add(o.warm+o.hang)
	end := backAt.Add(o.after)
	var mu sync.Mutex
	var flood, probes []sample
	var wg sync.WaitGroup
	every := time.Second * time.Duration(o.conns) / time.Duration(o.floodRate)
	for range o.conns {
		wg.Go(func() {
			next := time.Now()
			for time.Now().Before(end) {
				time.Sleep(time.Until(next))
				if next = next.Add(every); time.Until(next) < -every {
					next = time.Now() // behind: no catching up in a burst
				}
				at := time.Now()
				st, lat := get("flood")
				mu.Lock()
				flood = append(flood, sample{at: at, lat: lat, status: st})
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(o.probeRate))
		defer tick.Stop()
		for i := 0; time.Now().Before(end); i++ {
			<-tick.C
			key := fmt.Sprintf("probe-%s-%d", label, i)
			wg.Go(func() {
				at := time.Now()
				st, lat := get(key)
				mu.Lock()
				probes = append(probes, sample{at: at, lat: lat, status: st, key: key})
				mu.Unlock()
			})
		}
	})
	time.Sleep(time.Until(hangAt))
	proxy.Set(faultproxy.Hang)
	time.Sleep(time.Until(backAt))
	proxy.Set(faultproxy.Pass)
	wg.Wait()
	// What the proxy passed on and its clients gave up on, dynalite still
	// answers: let it drain, so that the next build finds it idle.
	for deadline := time.Now().Add(5 * time.Minute); proxy.InFlight() > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}

	r := Result{Label: label, DynaliteRequests: proxy.Forwarded(), Memory: memory}
	from, to := hangAt.Add(time.Second), backAt
	var floodLat, probeLat []time.Duration
	for _, s := range flood {
		if !s.at.Before(from) && s.at.Before(to) {
			r.HangRequests++
			floodLat = append(floodLat, s.lat)
		}
		if s.status >= 500 || s.status == 0 {
			r.ServerErrors++
		}
	}
	for _, s := range probes {
		if !s.at.Before(from) && s.at.Before(to) {
			r.HangRequests++
			probeLat = append(probeLat, s.lat)
		}
		if s.status >= 500 || s.status == 0 {
			r.ServerErrors++
		}
	}
	r.FloodPerSecond = float64(len(floodLat)) / to.Sub(from).Seconds()
	for _, s := range seen {
		if !s.At.Before(from) && s.At.Before(to) {
			r.HangStoreCalls++
		}
	}
	if r.HangRequests > 0 {
		r.CallsPerRequest = float64(r.HangStoreCalls) / float64(r.HangRequests)
	}
	r.FloodP50ms, r.FloodP95ms = pct(floodLat, 0.5), pct(floodLat, 0.95)
	r.ProbeP50ms = pct(probeLat, 0.5)

	// Which probes the store counted: a write of the probe's hashed key
	// that the proxy passed on and the store answered.
	h, err := keyhash.New(secret)
	if err != nil {
		return Result{}, err
	}
	var storeLat, warmLat []time.Duration
	for _, s := range seen {
		switch {
		case s.Mode != faultproxy.Pass:
		case !s.At.Before(backAt):
			storeLat = append(storeLat, s.Took)
		case s.At.Before(hangAt):
			warmLat = append(warmLat, s.Took)
		}
	}
	r.WarmStoreP50ms = pct(warmLat, 0.5)
	r.StoreP50ms, r.StoreP90ms = pct(storeLat, 0.5), pct(storeLat, 0.9)
	// Answered in time: a call the store answered after its client gave up
	// spent the units, but the request was decided without it.
	budget, err := time.ParseDuration(o.storeTimeout)
	if err != nil {
		return Result{}, err
	}
	counted := map[string]bool{}
	for _, s := range seen {
		if s.Mode == faultproxy.Pass && s.Status == 200 && s.Took < budget {
			counted[string(s.Body)] = true
		}
	}
	bodies := make([]string, 0, len(counted))
	for b := range counted {
		bodies = append(bodies, b)
	}
	isCounted := func(key string) bool {
		hk := h.Hash("m", []byte("h:"+key))
		return slices.ContainsFunc(bodies, func(b string) bool { return strings.Contains(b, hk) })
	}
	slices.SortFunc(probes, func(a, b sample) int { return a.at.Compare(b.at) })
	recovered := time.Time{}
	for _, s := range probes {
		if s.at.Before(backAt) {
			continue
		}
		r.AfterProbes++
		ok := isCounted(s.key)
		if !ok {
			r.AfterUncounted++
			recovered = time.Time{}
			continue
		}
		if r.FirstCountedMs == 0 {
			r.FirstCountedMs = ms(s.at.Sub(backAt))
		}
		if recovered.IsZero() {
			recovered = s.at
		}
	}
	if recovered.IsZero() {
		r.RecoveryMs = ms(end.Sub(backAt))
	} else {
		r.RecoveryMs = ms(recovered.Sub(backAt))
	}
	if logText, err := os.ReadFile(logf.Name()); err == nil {
		r.Reopened = reopened(string(logText), backAt)
	}
	fmt.Fprintf(os.Stderr, "%s: %+v\n", label, r)
	return r, nil
}

var openLine = regexp.MustCompile(`time=(\S+) level=WARN msg="edgelimit: store breaker open"`)

// reopened counts the breaker's openings in the server's log at or after
// back.
func reopened(log string, back time.Time) int {
	n := 0
	for _, m := range openLine.FindAllStringSubmatch(log, -1) {
		if at, err := time.Parse(time.RFC3339Nano, m[1]); err == nil && !at.Before(back) {
			n++
		}
	}
	return n
}

var listenLine = regexp.MustCompile(`listening on (http://[0-9.:]+)`)

func listening(r io.Reader) (string, error) {
	buf := make([]byte, 4096)
	var got []byte
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		if m := listenLine.FindSubmatch(got); m != nil {
			return string(m[1]), nil
		}
		if err != nil {
			return "", fmt.Errorf("serve exited: %s", got)
		}
	}
	return "", fmt.Errorf("serve did not listen: %s", got)
}

func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return ms(d[min(len(d)-1, int(p*float64(len(d))))])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
