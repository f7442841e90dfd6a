package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/internal/tools/replicator/replicate"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/setup"
)

// The kv part (issue #14): separate `edgelimit serve` processes share one
// table and one key, a client spreads requests over them, and the part
// counts what they admit against what one perfect bucket admits for the
// same requests, with the code before issue #14 (-kv-old, built from a git
// worktree by mk/bench.mk) and the working tree's (-kv-new) in the same
// run. Every process reaches dynalite through a counting proxy of its own,
// so the store calls are counted per process. Two regions are two dynalite
// servers and internal/tools/replicator between them.

// kvHashKey is every process's EDGELIMIT_HASH_KEY: the same client hashes
// to the same key in all of them.
var kvHashKey = base64.StdEncoding.EncodeToString([]byte("edgelimit-bench-kv-hash-key-0123456789"))

// KVData is the result of the kv part.
type KVData struct {
	OldCommit string        `json:"old_commit,omitempty"`
	OldBinary string        `json:"old_binary,omitempty"`
	OldError  string        `json:"old_unavailable,omitempty"`
	Seconds   float64       `json:"seconds"`
	Runs      []KVRun       `json:"runs"`
	Regions   []KVRegionRun `json:"regions"`
}

// KVRun is one scenario with one binary.
type KVRun struct {
	ID       string  `json:"id"`
	Label    string  `json:"label"`
	Binary   string  `json:"binary"` // old | new
	Procs    int     `json:"procs"`
	Policy   string  `json:"policy"`
	Offered  float64 `json:"offered_per_sec"` // 0: a concurrent burst
	Requests int     `json:"requests"`
	Admitted int     `json:"admitted"`
	Denied   int     `json:"denied"`
	Other    int     `json:"other"`
	// Ideal is what one perfect bucket admits for the same requests at the
	// instants the client sent them.
	Ideal   int64   `json:"ideal"`
	Seconds float64 `json:"seconds"`
	// Calls are all the store calls; PerProc each process's.
	Calls   Snapshot   `json:"calls"`
	PerProc []Snapshot `json:"per_proc"`
	// MaxWritesPerS is the most writes (PutItem, UpdateItem) one process
	// made in any sync interval (1s) after the first two seconds of the
	// run (a key's first interval in a process, which starts at its first
	// request, is its reservations).
	MaxWritesPerS int `json:"max_writes_per_sync_interval"`
	// MinWriteGapMs is the shortest time between two writes of one process
	// after the first two seconds (0: fewer than two writes).
	MinWriteGapMs float64 `json:"min_write_gap_ms"`
	// Writes are each process's write instants, ms after the run's start.
	Writes [][]float64 `json:"write_ms"`
	// Replication is the replicator's counters (two regions only).
	Replication *replicate.Stats `json:"replication,omitempty"`
	Error       string           `json:"error,omitempty"`
}

// Ratio is admitted over ideal.
func (r KVRun) Ratio() float64 {
	if r.Ideal == 0 {
		return 0
	}
	return float64(r.Admitted) / float64(r.Ideal)
}

// WritesPerProcSec returns the largest and the mean writes a second of one
// process (PutItem, UpdateItem).
func (r KVRun) WritesPerProcSec() (maxW, mean float64) {
	if r.Seconds <= 0 || len(r.PerProc) == 0 {
		return 0, 0
	}
	var sum float64
	for _, s := range r.PerProc {
		w := float64(s.Calls["PutItem"]+s.Calls["UpdateItem"]) / r.Seconds
		maxW = max(maxW, w)
		sum += w
	}
	return maxW, sum / float64(len(r.PerProc))
}

// KVRegionRun pairs the two binaries' runs of one lag.
type KVRegionRun struct {
	Lag string `json:"lag"`
	Old *KVRun `json:"old,omitempty"`
	New *KVRun `json:"new,omitempty"`
}

// kvSpec is one scenario.
type kvSpec struct {
	id, label string
	procs     int
	limit     int64
	window    time.Duration
	burst     int64
	rate      float64 // requests a second; 0: burstN requests at once
	burstN    int
	regions   int
	lag       time.Duration
	target    float64 // issue #14's ceiling on admitted/ideal
}

func (s kvSpec) policyYAML() string {
	// A store failure is a 503 (counted as a failure), never a fail-open
	// admission, and the budget is generous for this loaded machine: the
	// run measures the algorithm, not how dynalite copes on 2 cores.
	return fmt.Sprintf("version: 1\npolicies:\n  - name: kv\n    routes: [\"GET /kv\"]\n    key: ip\n    strategy: kv\n    limit: %d\n    window: %s\n    burst: %d\n    on_store_error: deny\n    store_timeout: %s\n",
		s.limit, durYAML(s.window), s.burst, durYAML(kvStoreTimeout))
}

func (s kvSpec) policy() string {
	return fmt.Sprintf("limit %d per %s, burst %d, sync_interval 1s, on_store_error deny, store_timeout %s", s.limit, durYAML(s.window), s.burst, durYAML(kvStoreTimeout))
}

// kvStoreTimeout is the runs' store_timeout.
const kvStoreTimeout = 2 * time.Second

func durYAML(d time.Duration) string {
	switch {
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

var kvSpecs = []kvSpec{
	{id: "burst16", label: "concurrent burst, 160 requests over 16 processes", procs: 16, limit: 8, window: time.Minute, burst: 8, burstN: 160, target: 2},
	{id: "steady4", label: "steady 100/s over 4 processes", procs: 4, limit: 8, window: time.Minute, burst: 8, rate: 100, target: 1.1},
	{id: "steady16", label: "steady 100/s over 16 processes", procs: 16, limit: 8, window: time.Minute, burst: 8, rate: 100, target: 1.1},
	{id: "rate2x4", label: "steady 2× a 10/s rate (20/s) over 4 processes", procs: 4, limit: 10, window: time.Second, burst: 8, rate: 20, target: 1.1},
	{id: "one", label: "steady 100/s, one process", procs: 1, limit: 8, window: time.Minute, burst: 8, rate: 100, target: 1},
}

var kvRegionSpecs = []kvSpec{
	{id: "regions-1s", label: "two regions, 2 processes each, steady 100/s, lag 1s", procs: 4, limit: 8, window: time.Minute, burst: 8, rate: 100, regions: 2, lag: time.Second},
	{id: "regions-5s", label: "two regions, 2 processes each, steady 100/s, lag 5s", procs: 4, limit: 8, window: time.Minute, burst: 8, rate: 100, regions: 2, lag: 5 * time.Second},
}

type kvEnv struct {
	o        options
	dir      string
	self     string // this program, for kv-server
	bins     map[string]string
	dynB     string // the second region's dynalite
	clientA  *dynamodb.Client
	clientB  *dynamodb.Client
	duration time.Duration
}

func runKV(ctx context.Context, o options) (any, error) {
	if o.dynalite == "" {
		return nil, errors.New("no dynalite endpoint: run under `go run ./internal/tools/testservers -only dynalite --` or set -dynalite")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	env := &kvEnv{o: o, dir: filepath.Join(o.out, "kv"), self: self, bins: map[string]string{}, duration: o.kvDuration}
	if err := os.MkdirAll(env.dir, 0o755); err != nil {
		return nil, err
	}
	data := KVData{Seconds: o.kvDuration.Seconds(), OldCommit: o.kvOldCommit}
	newBin := o.kvNew
	if newBin == "" {
		newBin = filepath.Join(env.dir, "edgelimit-new")
		logf("kv: building ./cmd/edgelimit from the working tree")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", newBin, "./cmd/edgelimit")
		cmd.Dir = o.root
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/edgelimit: %v\n%s", err, b)
		}
	}
	env.bins["new"] = newBin
	if o.kvOld != "" {
		if _, err := os.Stat(o.kvOld); err != nil {
			data.OldError = err.Error()
		} else {
			env.bins["old"] = o.kvOld
			data.OldBinary = o.kvOld
		}
	} else {
		data.OldError = "no -kv-old binary (mk/bench.mk builds it from KV_OLD_COMMIT)"
	}
	if env.clientA, err = ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: o.dynalite}); err != nil {
		return nil, err
	}

	binaries := []string{"old", "new"}
	wanted := func(id string) bool { return o.kvOnly == "" || slices.Contains(strings.Split(o.kvOnly, ","), id) }
	for _, spec := range kvSpecs {
		if !wanted(spec.id) {
			continue
		}
		for _, bin := range binaries {
			if env.bins[bin] == "" {
				continue
			}
			run := env.run(ctx, spec, bin)
			logf("kv: %-9s %-3s %2d procs: %d requests, admitted %d, ideal %d (%.2f×), writes/proc/s max %.2f%s",
				spec.id, bin, spec.procs, run.Requests, run.Admitted, run.Ideal, run.Ratio(), first(run.WritesPerProcSec()), errNote(run.Error))
			data.Runs = append(data.Runs, run)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}

	stopB, endpointB, err := startDynalite(ctx, o.root, env.dir)
	if err != nil {
		return nil, fmt.Errorf("second dynalite: %w", err)
	}
	defer stopB()
	env.dynB = endpointB
	if env.clientB, err = ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: endpointB}); err != nil {
		return nil, err
	}
	for _, spec := range kvRegionSpecs {
		if !wanted(spec.id) {
			continue
		}
		rr := KVRegionRun{Lag: spec.lag.String()}
		for _, bin := range binaries {
			if env.bins[bin] == "" {
				continue
			}
			run := env.run(ctx, spec, bin)
			logf("kv: %-10s %-3s: %d requests, admitted %d, ideal %d (%.2f×), lost to last writer wins %d%s",
				spec.id, bin, run.Requests, run.Admitted, run.Ideal, run.Ratio(), superseded(run), errNote(run.Error))
			if bin == "old" {
				rr.Old = &run
			} else {
				rr.New = &run
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		data.Regions = append(data.Regions, rr)
	}
	return data, nil
}

func first(a, _ float64) float64 { return a }

func errNote(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func superseded(r KVRun) int64 {
	if r.Replication == nil {
		return 0
	}
	return r.Replication.Superseded
}

// proc is one server process behind its counting proxy.
type proc struct {
	cmd    *exec.Cmd
	url    string
	proxy  *http.Server
	tally  *Tally
	writes *writeLog
	done   chan struct{}
}

// writeLog records when a process wrote.
type writeLog struct {
	mu sync.Mutex
	at []time.Time
}

func (w *writeLog) add(t time.Time) {
	w.mu.Lock()
	w.at = append(w.at, t)
	w.mu.Unlock()
}

// offsets returns the write instants in ms after start.
func (w *writeLog) offsets(start time.Time) []float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]float64, 0, len(w.at))
	for _, t := range w.at {
		out = append(out, float64(t.Sub(start).Microseconds())/1000)
	}
	slices.Sort(out)
	return out
}

// maxIn returns the most writes in any window [x, x+d) with x ≥ from.
func (w *writeLog) maxIn(from time.Time, d time.Duration) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var at []time.Time
	for _, t := range w.at {
		if !t.Before(from) {
			at = append(at, t)
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	best, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= d {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

var listening = regexp.MustCompile(`listening on (http://[0-9.:]+)`)

// startProxy returns a counting reverse proxy to endpoint on a free port.
func startProxy(endpoint string) (*http.Server, string, *Tally, *writeLog, error) {
	target, err := url.Parse(endpoint)
	if err != nil {
		return nil, "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, nil, err
	}
	tally, writes := NewTally(), &writeLog{}
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := r.Header.Get("X-Amz-Target")
		if i := strings.LastIndexByte(op, '.'); i >= 0 {
			op = op[i+1:]
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rru, wru := capacity(op, body)
		tally.add(op, rru, wru)
		if op == "PutItem" || op == "UpdateItem" {
			writes.add(time.Now())
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), tally, writes, nil
}

// start runs one server process of spec with binary bin in region (0 or
// 1), on table, and returns once it listens.
func (env *kvEnv) start(ctx context.Context, spec kvSpec, bin string, region int, table, policies string, logf *os.File) (*proc, error) {
	endpoint := env.o.dynalite
	if region == 1 {
		endpoint = env.dynB
	}
	srv, proxyURL, tally, writes, err := startProxy(endpoint)
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	if spec.regions > 1 && bin == "new" {
		names := []string{"a", "b"}
		cmd = exec.CommandContext(ctx, env.self, kvServerCmd, "-policies", policies, "-dynamodb-endpoint", proxyURL, "-table", table,
			"-region", names[region], "-regions", "a,b")
	} else {
		cmd = exec.CommandContext(ctx, env.bins[bin], "serve", "--addr", "127.0.0.1:0", "--store", "dynamodb",
			"--dynamodb-endpoint", proxyURL, "--table", table, "--policies", policies, "--log-format", "json")
	}
	cmd.Env = append(os.Environ(), setup.EnvHashKey+"="+kvHashKey, "GOMAXPROCS=1")
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, proxy: srv, tally: tally, writes: writes, done: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case p.url = <-urlc:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before it listened (log %s)", bin, logf.Name())
	case <-time.After(60 * time.Second):
		p.stop()
		return nil, fmt.Errorf("%s did not listen within 60s", bin)
	}
}

func (p *proc) stop() {
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	_ = p.proxy.Close()
}

// run runs spec with binary bin on fresh tables; a failure is recorded in
// the run, not returned, so that the other runs go on.
func (env *kvEnv) run(ctx context.Context, spec kvSpec, bin string) KVRun {
	run := KVRun{ID: spec.id, Label: spec.label, Binary: bin, Procs: spec.procs, Policy: spec.policy(), Offered: spec.rate}
	if err := env.runErr(ctx, spec, bin, &run); err != nil {
		run.Error = err.Error()
	}
	return run
}

func (env *kvEnv) runErr(ctx context.Context, spec kvSpec, bin string, run *KVRun) error {
	table := fmt.Sprintf("bench-kv-%s-%s-%d", spec.id, bin, time.Now().UnixNano())
	clients := []*dynamodb.Client{env.clientA}
	if spec.regions > 1 {
		clients = append(clients, env.clientB)
	}
	for _, c := range clients {
		if err := ddb.CreateTable(ctx, c, table); err != nil {
			return err
		}
	}
	policies := filepath.Join(env.dir, spec.id+".yaml")
	if err := os.WriteFile(policies, []byte(spec.policyYAML()), 0o644); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(env.dir, spec.id+"-"+bin+".log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for i := range spec.procs {
		region := 0
		if spec.regions > 1 {
			region = i % spec.regions
		}
		p, err := env.start(ctx, spec, bin, region, table, policies, logFile)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	var repl *replicate.Replicator
	rctx, stopRepl := context.WithCancel(ctx)
	defer stopRepl()
	replDone := make(chan error, 1)
	if spec.regions > 1 {
		repl, err = replicate.New(replicate.Config{
			A:   replicate.Replica{Name: "a", Client: env.clientA, Table: table},
			B:   replicate.Replica{Name: "b", Client: env.clientB, Table: table},
			Lag: spec.lag,
		})
		if err != nil {
			return err
		}
		go func() { replDone <- repl.Run(rctx) }()
	}

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second, DisableCompression: true,
	}}
	defer hc.CloseIdleConnections()
	// Warm the connections on a route no policy guards.
	for _, p := range procs {
		for range 2 {
			if resp, err := hc.Get(p.url + "/warm"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
	before := make([]Snapshot, len(procs))
	for i, p := range procs {
		before[i] = p.tally.Snapshot()
	}

	var admitted, denied, other atomic.Int64
	var mu sync.Mutex
	var instants []time.Time
	send := func(u string) {
		at := time.Now()
		mu.Lock()
		instants = append(instants, at)
		mu.Unlock()
		resp, err := hc.Get(u + "/kv")
		if err != nil {
			other.Add(1)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			admitted.Add(1)
		case resp.StatusCode == http.StatusTooManyRequests:
			denied.Add(1)
		default:
			other.Add(1)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	if spec.rate == 0 {
		gate := make(chan struct{})
		for i := range spec.burstN {
			u := procs[i%len(procs)].url
			wg.Go(func() { <-gate; send(u) })
		}
		close(gate)
	} else {
		n := int(spec.rate * env.duration.Seconds())
		for i := range n {
			at := start.Add(time.Duration(float64(i) / spec.rate * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
			u := procs[i%len(procs)].url
			wg.Go(func() { send(u) })
		}
	}
	wg.Wait()
	run.Seconds = time.Since(start).Seconds()
	if spec.regions > 1 {
		// Let the last writes replicate before the counters are read.
		time.Sleep(spec.lag + 200*time.Millisecond)
		stopRepl()
		if err := <-replDone; err != nil {
			return err
		}
		st := repl.Stats()
		run.Replication = &st
	}
	run.Admitted, run.Denied, run.Other = int(admitted.Load()), int(denied.Load()), int(other.Load())
	run.Requests = len(instants)
	run.Calls = Snapshot{Calls: map[string]int64{}}
	for i, p := range procs {
		s := p.tally.Snapshot().Sub(before[i])
		run.PerProc = append(run.PerProc, s)
		run.Calls = run.Calls.Add(s)
		if spec.rate > 0 {
			run.MaxWritesPerS = max(run.MaxWritesPerS, p.writes.maxIn(start.Add(2*time.Second), time.Second))
		}
		ws := p.writes.offsets(start)
		run.Writes = append(run.Writes, ws)
		for i := 1; i < len(ws); i++ {
			if ws[i-1] >= 2000 && (run.MinWriteGapMs == 0 || ws[i]-ws[i-1] < run.MinWriteGapMs) {
				run.MinWriteGapMs = ws[i] - ws[i-1]
			}
		}
	}
	slices.SortFunc(instants, func(a, b time.Time) int { return a.Compare(b) })
	perfect := kvbucket.Params{Capacity: spec.burst, Limit: spec.limit, Window: spec.window}
	if len(instants) > 0 {
		ps := perfect.Full(instants[0])
		for _, at := range instants {
			var d edgelimit.Decision
			if ps, d = perfect.TakeAt(ps, at, 1); d.Allowed {
				run.Ideal++
			}
		}
	}
	if run.Other > 0 {
		return fmt.Errorf("%d requests failed (neither 200 nor 429)", run.Other)
	}
	return nil
}

// startDynalite starts a dynalite of its own (the second region's) from
// the repository's node_modules on a free port.
func startDynalite(ctx context.Context, root, dir string) (stop func(), endpoint string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	logFile, err := os.Create(filepath.Join(dir, "dynalite-b.log"))
	if err != nil {
		return nil, "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "node_modules", ".bin", "dynalite"), "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, "", err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logFile.Close()
	}
	endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
			c.Close()
			return stop, endpoint, nil
		}
	}
	stop()
	return nil, "", errors.New("dynalite did not listen within 30s")
}

// kvRun returns the run of id with binary bin, or nil.
func (d *KVData) run(id, bin string) *KVRun {
	for i := range d.Runs {
		if r := &d.Runs[i]; r.ID == id && r.Binary == bin {
			return r
		}
	}
	return nil
}

func kvCell(r *KVRun) string {
	switch {
	case r == nil:
		return "— | —"
	case r.Error != "":
		return fmt.Sprintf("%d (%s) | —", r.Admitted, oneLine(r.Error))
	}
	return fmt.Sprintf("%d | %.2f×", r.Admitted, r.Ratio())
}

func kvWrites(r *KVRun, burst bool) string {
	if r == nil || r.Error != "" {
		return "—"
	}
	if burst {
		var maxW int64
		for _, s := range r.PerProc {
			maxW = max(maxW, s.Calls["PutItem"]+s.Calls["UpdateItem"])
		}
		return fmt.Sprintf("%d in all", maxW)
	}
	m, mean := r.WritesPerProcSec()
	gap := "—"
	if r.MinWriteGapMs > 0 {
		gap = fmt.Sprintf("%.3f s", r.MinWriteGapMs/1000)
	}
	return fmt.Sprintf("%.2f (mean %.2f); %s", m, mean, gap)
}

// kvCost returns a run's store calls and units per decision.
func kvCost(r *KVRun) (calls string, wru, rru float64) {
	n := int64(r.Admitted + r.Denied)
	if n == 0 {
		return "", 0, 0
	}
	return opsPer(r.Calls, n), r.Calls.WRU / float64(n), r.Calls.RRU / float64(n)
}

func renderKV(w *mdWriter, l *loaded) {
	d := l.kv
	w.p("## 5. kv: separate processes sharing one table (issue #14)")
	w.p("")
	w.p("`%s`", l.envs["kv"].Command)
	w.p("")
	old := "the code before issue #14"
	if d.OldCommit != "" {
		old += " (commit " + d.OldCommit + ")"
	}
	w.p("Each process is a real `edgelimit serve --store dynamodb` (**old**: %s, built from a `git worktree` by", old)
	w.p("mk/bench.mk; **new**: the working tree), with GOMAXPROCS=1, its DynamoDB calls going through a counting proxy of its own to")
	w.p("the dynalite that `make bench` starts, on a fresh table per run. One client address, so one key; the client sends every")
	w.p("request from its own goroutine, round-robin over the processes (open loop at the offered rate, or all at once for the")
	w.p("burst). *Ideal* is what one perfect token bucket admits for the same requests at the instants they were sent. Policies")
	w.p("are `kv` with `on_store_error: deny` (a store failure is counted as a failure, never as a fail-open admission) and a")
	w.p("`store_timeout` of %s (generous for this loaded machine: the runs measure the algorithm, not dynalite on 2 cores). Steady", durYAML(kvStoreTimeout))
	w.p("runs last %.0f s. *Writes* are a process's `PutItem` and `UpdateItem` calls (per key, since there is one): per second over", d.Seconds)
	w.p("the run (the largest process's and the mean), then the closest two writes of one process after the run's first two seconds")
	w.p("(a key's first interval in a process is its reservations), as the proxy saw them (a sync interval is 1 s; a few ms less is")
	w.p("the proxy's jitter, a second write within milliseconds a raise guessed wrong); for the burst, the largest process's writes in all.")
	if d.OldError != "" {
		w.p("")
		w.p("The old binary was not measured: %s.", oneLine(d.OldError))
	}
	w.p("")
	w.p("| scenario | policy | processes | requests | ideal | old admitted | × ideal | new admitted | × ideal | target | old writes/process/s; closest two | new writes/process/s; closest two |")
	w.p("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
	for _, spec := range kvSpecs {
		o, n := d.run(spec.id, "old"), d.run(spec.id, "new")
		ref := n
		if ref == nil {
			ref = o
		}
		if ref == nil {
			continue
		}
		target := fmt.Sprintf("≤ %.1f×", spec.target)
		if spec.procs == 1 {
			target = "exactly the bucket"
		}
		w.p("| %s | %s | %d | %d | %d | %s | %s | %s | %s | %s |", spec.label, spec.policy(), spec.procs, ref.Requests, ref.Ideal,
			kvCell(o), kvCell(n), target, kvWrites(o, spec.rate == 0), kvWrites(n, spec.rate == 0))
	}
	w.p("")
	if len(d.Regions) > 0 {
		w.p("### Two regions")
		w.p("")
		w.p("Two dynalite servers stand for two regions of a DynamoDB Global Table; `internal/tools/replicator` copies every changed")
		w.p("item from one to the other a fixed lag after it sees the change, last writer wins per item (what it models and what not:")
		w.p("its package documentation). Two processes per region, the client round-robin over all four. Old: `edgelimit serve`, one item")
		w.p("per bucket, which both regions write. New: the working tree's kvbucket with `DynamoDBConfig.Region`/`Regions` (a bench")
		w.p("server with serve's wiring, since `edgelimit serve` has no region flag yet), each region writing its own part.")
		w.p("*Lost to last writer wins*: changes of one region the replicator dropped because the other region changed the same item later.")
		w.p("")
		w.p("| lag | requests | ideal | old admitted | × ideal | new admitted | × ideal | lost to last writer wins, old / new |")
		w.p("|---|---:|---:|---:|---:|---:|---:|---|")
		for _, rr := range d.Regions {
			ref := rr.New
			if ref == nil {
				ref = rr.Old
			}
			if ref == nil {
				continue
			}
			lost := func(r *KVRun) string {
				if r == nil || r.Replication == nil {
					return "—"
				}
				return fmt.Sprint(r.Replication.Superseded)
			}
			w.p("| %s | %d | %d | %s | %s | %s / %s |", rr.Lag, ref.Requests, ref.Ideal, kvCell(rr.Old), kvCell(rr.New), lost(rr.Old), lost(rr.New))
		}
		w.p("")
	}
	w.p("### Store calls and cost per decision")
	w.p("")
	w.p("Every request of the steady runs (allowed and denied), at the prices of section 4:")
	w.p("")
	w.p("| scenario | binary | calls per decision | WRU + RRU per decision | $ per million decisions |")
	w.p("|---|---|---|---:|---:|")
	for _, spec := range kvSpecs {
		if spec.rate == 0 {
			continue
		}
		for _, bin := range []string{"old", "new"} {
			r := d.run(spec.id, bin)
			if r == nil || r.Error != "" {
				continue
			}
			calls, wru, rru := kvCost(r)
			w.p("| %s | %s | %s | %.4f + %.4f | %s |", spec.label, bin, calls, wru, rru, dollars(usd(wru, rru)))
		}
	}
	w.p("")
}
