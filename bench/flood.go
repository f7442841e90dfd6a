package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/edgelimit/edgelimit/client"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/internal/ddb"
)

// The flood experiment's parameters.
const (
	// floodRate is the flooding client's offered rate, over at most
	// floodConns connections: without a limiter the connections are the
	// bound (a closed loop), with one the 429s come back fast enough for
	// the rate to be the bound.
	floodRate  = 2000
	floodConns = 64
	// legitRate is the legitimate client's rate, well inside every policy.
	legitRate = 8
	// serverProcs and loadgenProcs split the machine's 2 cores: the server
	// process gets one P, the load generator (both clients) the other.
	serverProcs  = 1
	loadgenProcs = 1
	// requestTimeout bounds every request of the experiment.
	requestTimeout = 10 * time.Second
)

// Loopback source addresses: the policies key on the client address, so
// each client dials from its own (Linux routes all of 127.0.0.0/8 to lo).
const (
	floodAddr = "127.0.0.2"
	legitAddr = "127.0.0.3"
)

// sweepRates are the offered rates of the admitted-vs-offered sweep.
var sweepRates = []int{10, 20, 50, 100, 200, 500, 1000}

// FloodData is the result of the flood part.
type FloodData struct {
	FloodRate    int     `json:"flood_rate"`
	FloodConns   int     `json:"flood_conns"`
	LegitRate    int     `json:"legit_rate"`
	PhaseSeconds float64 `json:"phase_seconds"`
	ServerProcs  int     `json:"server_gomaxprocs"`
	LoadgenProcs int     `json:"loadgen_gomaxprocs"`
	Query        string  `json:"query"`
	SearchCPUms  float64 `json:"search_cpu_ms"`
	CorpusBytes  int     `json:"corpus_bytes"`
	Store        string  `json:"store"`
	Phases       []FloodPhase
	SweepStep    float64       `json:"sweep_step_seconds"`
	Sweep        []SweepSeries `json:"sweep"`
}

// FloodPhase is one configuration under the flood.
type FloodPhase struct {
	ID          string `json:"id"`
	Label       string `json:"label"`
	Policy      string `json:"policy,omitempty"`
	Unavailable string `json:"unavailable,omitempty"`
	Seconds     float64
	Flood       ClientStats `json:"flood"`
	Legit       ClientStats `json:"legit"`
	// CPU use in cores (CPU seconds per second) over the phase: the server
	// process, the load generator, the store (dynalite), and the host's
	// busy share of all its cores (other users of the machine included).
	ServerCPU  float64 `json:"server_cpu"`
	LoadgenCPU float64 `json:"loadgen_cpu"`
	StoreCPU   float64 `json:"store_cpu"`
	HostBusy   float64 `json:"host_busy"`
	// Requests the server answered, by outcome, and the store calls each
	// outcome's requests made.
	Requests     map[string]int64 `json:"requests"`
	AllowedCalls Snapshot         `json:"allowed_calls"`
	DeniedCalls  Snapshot         `json:"denied_calls"`
	AllCalls     Snapshot         `json:"all_calls"`
	// Limiter is what the engine reported: decisions made by
	// on_store_error (degraded), store errors, the limiter's latency.
	Limiter LimiterStats `json:"limiter"`
}

// CallsPer returns the store calls per request of an outcome.
func (p FloodPhase) CallsPer(class string) float64 {
	n := p.Requests[class]
	if n == 0 {
		return 0
	}
	s := p.AllowedCalls
	if class == "denied" {
		s = p.DeniedCalls
	}
	return float64(s.Total()) / float64(n)
}

// ClientStats summarises one client's requests.
type ClientStats struct {
	Sent   int            `json:"sent"`
	OK     int            `json:"ok"`
	Denied int            `json:"denied"`
	Other  int            `json:"other"`
	Codes  map[string]int `json:"codes"`
	// All is the latency of every response; Allowed of the 2xx ones.
	All     Pcts `json:"all"`
	Allowed Pcts `json:"allowed"`
}

// DeniedShare is the share of requests answered 429.
func (c ClientStats) DeniedShare() float64 {
	if c.Sent == 0 {
		return 0
	}
	return float64(c.Denied) / float64(c.Sent)
}

// Pcts are latency percentiles in milliseconds.
type Pcts struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func pcts(lats []time.Duration) Pcts {
	slices.Sort(lats)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p := Pcts{N: len(lats)}
	if len(lats) > 0 {
		p.P50, p.P95, p.P99, p.Max = ms(percentile(lats, 0.50)), ms(percentile(lats, 0.95)), ms(percentile(lats, 0.99)), ms(lats[len(lats)-1])
	}
	return p
}

// SweepSeries is one strategy's admitted load at each offered load.
type SweepSeries struct {
	ID       string       `json:"id"`
	Label    string       `json:"label"`
	Points   []SweepPoint `json:"points"`
	CPUNotes string       `json:"cpu_notes,omitempty"`
}

// SweepPoint is one step of the sweep.
type SweepPoint struct {
	Offered   float64 `json:"offered"`
	Sent      int     `json:"sent"`
	Admitted  float64 `json:"admitted_per_sec"`
	Denied    int     `json:"denied"`
	Other     int     `json:"other"`
	P50ms     float64 `json:"p50_ms"`
	ServerCPU float64 `json:"server_cpu"`
}

// phaseSpec says how to run one phase.
type phaseSpec struct {
	id, label string
	// policy is the policy file's one policy (YAML), empty for none.
	policy string
	// dynamo: the durable and kv stores are on dynalite.
	dynamo bool
	// signedClient: the legitimate client is the reference client (keeps
	// tokens, solves proofs of work).
	signedClient bool
	// algorithm, when set, is a durable algorithm this build must have.
	algorithm string
	// keyRing: the server gets EDGELIMIT_SECRETS, the key ring of the
	// proof-of-work challenges of a durable or kv policy's proof_of_work
	// (setup.Limiters reads it from the environment).
	keyRing bool
}

func searchPolicy(body string) string {
	return "  - name: search\n    routes: [\"GET /search\"]\n    key: ip\n" + body
}

// gcraPolicy is the search function's policy (functions/handlers/policies/
// search.yaml; nginx's rate=10r/s burst=19 nodelay, one fewer at once than
// the published experiment's burst=20): durable gcra per address, an
// in-process limiter deciding while the store fails; extra adds fields.
func gcraPolicy(extra string) string {
	return searchPolicy("    strategy: durable\n    algorithm: gcra\n    limit: 10\n    window: 1s\n    burst: 20\n    on_store_error: local\n" + extra)
}

func fixedWindowPolicy(extra string) string {
	return searchPolicy("    strategy: durable\n    algorithm: fixed-window\n    limit: 10\n    window: 1s\n    on_store_error: allow\n" + extra)
}

var floodPhases = []phaseSpec{
	{id: "none", label: "no limiter"},
	{id: "durable-gcra", label: "durable gcra 10/s burst 20 (the search function's policy), deny cache on, on_store_error: local", dynamo: true, algorithm: "gcra",
		policy: gcraPolicy("")},
	{id: "durable-gcra-open", label: "durable gcra, deny cache on, on_store_error: allow (fail open)", dynamo: true, algorithm: "gcra",
		policy: strings.Replace(gcraPolicy(""), "on_store_error: local", "on_store_error: allow", 1)},
	{id: "durable-gcra-nodc", label: "durable gcra, deny cache off", dynamo: true, algorithm: "gcra",
		policy: gcraPolicy("    deny_cache: false\n")},
	{id: "durable-gcra-closed", label: "durable gcra, deny cache on, on_store_error: deny", dynamo: true, algorithm: "gcra",
		policy: strings.Replace(gcraPolicy(""), "on_store_error: local", "on_store_error: deny", 1)},
	// Issue #13: the same policy with a soft threshold. Up to 10 of the
	// bucket's 20 units in use nothing changes; above, a request needs a
	// 16-bit proof of work (the legitimate client, client.Transport, would
	// solve one; the flood solves none and is refused with a challenge); past
	// the burst a plain 429.
	{id: "durable-gcra-pow", label: "durable gcra, deny cache on, on_store_error: local, `proof_of_work: {above: 10, bits: 16}`; the flood solves none", dynamo: true, algorithm: "gcra",
		signedClient: true, keyRing: true, policy: gcraPolicy("    proof_of_work: {above: 10, bits: 16, ttl: 10s}\n")},
	{id: "durable-gcra-pow-memory", label: "the same with proof of work, memory store", algorithm: "gcra",
		signedClient: true, keyRing: true, policy: gcraPolicy("    proof_of_work: {above: 10, bits: 16, ttl: 10s}\n")},
	{id: "durable-gcra-memory", label: "durable gcra, memory store (`edgelimit serve`'s default)", algorithm: "gcra",
		policy: gcraPolicy("")},
	{id: "durable-fw", label: "durable fixed-window 10/s, deny cache on", dynamo: true, algorithm: "fixed-window",
		policy: fixedWindowPolicy("")},
	{id: "durable-fw-nodc", label: "durable fixed-window 10/s, deny cache off", dynamo: true, algorithm: "fixed-window",
		policy: fixedWindowPolicy("    deny_cache: false\n")},
	{id: "kv", label: "kv token bucket 10/s burst 20", dynamo: true,
		policy: searchPolicy("    strategy: kv\n    limit: 10\n    window: 1s\n    burst: 20\n")},
	{id: "signed-pow", label: "signed 100/10s + proof of work (16 bits); the flood solves none", signedClient: true,
		policy: searchPolicy("    strategy: signed\n    limit: 100\n    window: 10s\n    proof_of_work: {bits: 16, ttl: 10s}\n")},
	{id: "signed", label: "signed 100/10s, no proof of work; the flood drops its tokens", signedClient: true,
		policy: searchPolicy("    strategy: signed\n    limit: 100\n    window: 10s\n")},
}

// sweepSpecs are the strategies of the admitted-vs-offered sweep.
var sweepSpecs = []string{"none", "durable-gcra", "durable-gcra-memory", "kv", "signed-pow"}

// floodEnv is what every phase shares.
type floodEnv struct {
	o         options
	exe       string
	dir       string
	storePID  int
	ddbClient ddb.TableAPI
}

func runFlood(ctx context.Context, o options) (any, error) {
	if o.dynalite == "" {
		return nil, errors.New("no dynalite endpoint: run under `go run ./internal/tools/testservers -only dynalite --` or set -dynalite")
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	env := &floodEnv{o: o, exe: exe, dir: filepath.Join(o.out, "flood")}
	if err := os.MkdirAll(env.dir, 0o755); err != nil {
		return nil, err
	}
	if u, err := url.Parse(o.dynalite); err == nil {
		if port, err := strconv.Atoi(u.Port()); err == nil {
			env.storePID = pidListening(port)
		}
	}
	c, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: o.dynalite})
	if err != nil {
		return nil, err
	}
	env.ddbClient = c

	// The load generator runs on one P; the server process on another.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(loadgenProcs))

	data := FloodData{
		FloodRate: floodRate, FloodConns: floodConns, LegitRate: legitRate, PhaseSeconds: o.phase.Seconds(),
		ServerProcs: serverProcs, LoadgenProcs: loadgenProcs, Query: searchQuery, Store: "dynalite",
		SweepStep: o.step.Seconds(),
	}
	only := phaseFilter()
	for _, spec := range floodPhases {
		if only != nil && !only[spec.id] {
			continue
		}
		ph, ready, err := env.runPhase(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("phase %s: %w", spec.id, err)
		}
		if ready.SearchCPUms > 0 && data.SearchCPUms == 0 {
			data.SearchCPUms, data.CorpusBytes = ready.SearchCPUms, ready.CorpusBytes
		}
		if ph.Unavailable != "" {
			logf("flood: %-24s unavailable: %s", spec.id, ph.Unavailable)
		} else {
			logf("flood: %-18s legit p50/p95/p99 %.0f/%.0f/%.0f ms; flood 429 %.1f%%, allowed p95 %.0f ms; server CPU %.0f%%, store %.0f%%; calls/denied %.3f; degraded %d/%d",
				spec.id, ph.Legit.All.P50, ph.Legit.All.P95, ph.Legit.All.P99, 100*ph.Flood.DeniedShare(), ph.Flood.Allowed.P95,
				100*ph.ServerCPU, 100*ph.StoreCPU, ph.CallsPer("denied"), ph.Limiter.Degraded, ph.Limiter.Decisions)
		}
		data.Phases = append(data.Phases, ph)
	}
	for _, id := range sweepSpecs {
		if only != nil && !only[id] {
			continue
		}
		i := slices.IndexFunc(floodPhases, func(s phaseSpec) bool { return s.id == id })
		s, err := env.runSweep(ctx, floodPhases[i])
		if err != nil {
			return nil, fmt.Errorf("sweep %s: %w", id, err)
		}
		if s != nil {
			data.Sweep = append(data.Sweep, *s)
		}
	}
	return data, nil
}

// phaseFilter returns the phases EDGELIMIT_BENCH_FLOOD_ONLY names
// (comma-separated ids, for re-running some phases beside earlier
// results), or nil for all of them.
func phaseFilter() map[string]bool {
	v := strings.TrimSpace(os.Getenv("EDGELIMIT_BENCH_FLOOD_ONLY"))
	if v == "" {
		return nil
	}
	only := map[string]bool{}
	for _, id := range strings.Split(v, ",") {
		only[strings.TrimSpace(id)] = true
	}
	return only
}

// available reports why spec cannot run in this build, or "".
func available(spec phaseSpec) string {
	if spec.algorithm == "" {
		return ""
	}
	p, err := benchPolicy(spec.policy)
	if err != nil {
		return err.Error()
	}
	if _, err := durablecounter.New(durablecounter.Config{Policy: p, Store: durablecounter.NewMemory(durablecounter.MemoryConfig{})}); err != nil {
		return err.Error()
	}
	return ""
}

// server is one flood-server process.
type server struct {
	cmd   *exec.Cmd
	ready serverReady
	done  chan error
}

func (env *floodEnv) start(ctx context.Context, spec phaseSpec) (*server, error) {
	args := []string{floodServerCmd}
	if spec.policy != "" {
		path := filepath.Join(env.dir, spec.id+".yaml")
		if err := os.WriteFile(path, []byte("version: 1\npolicies:\n"+spec.policy), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "-policies", path)
	}
	if spec.dynamo {
		table := fmt.Sprintf("bench-flood-%s-%d", spec.id, time.Now().UnixNano())
		if err := ddb.CreateTable(ctx, env.ddbClient, table); err != nil {
			return nil, err
		}
		args = append(args, "-dynamodb-endpoint", env.o.dynalite, "-table", table)
	}
	cmd := exec.CommandContext(ctx, env.exe, args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(serverProcs))
	if spec.keyRing {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		cmd.Env = append(cmd.Env, "EDGELIMIT_SECRETS=k1:"+base64.StdEncoding.EncodeToString(key))
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan error, 1)}
	line := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if !sc.Scan() {
			line <- errors.New("flood-server exited before it was ready")
			return
		}
		line <- json.Unmarshal(sc.Bytes(), &s.ready)
		for sc.Scan() {
		}
	}()
	select {
	case err = <-line:
	case <-time.After(60 * time.Second):
		err = errors.New("flood-server not ready after 60s")
	}
	go func() { s.done <- cmd.Wait() }()
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *server) stats() (ServerStats, error) {
	var st ServerStats
	resp, err := http.Get("http://" + s.ready.Admin + "/stats")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (s *server) reset() error {
	resp, err := http.Post("http://"+s.ready.Admin+"/reset", "text/plain", nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// loopbackClient returns an HTTP client whose connections come from the
// loopback address local.
func loopbackClient(local string, conns int) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			DialContext: d.DialContext, MaxIdleConns: conns, MaxIdleConnsPerHost: conns,
			IdleConnTimeout: 30 * time.Second, DisableCompression: true,
		},
	}
}

// sample is one response.
type sample struct {
	lat  time.Duration
	code uint16
}

// attack sends GET target at rate for du, at most rate*du requests over at
// most conns connections, and returns every response.
func attack(ctx context.Context, hc *http.Client, target string, rate int, du time.Duration, conns int) []sample {
	limit := int64(float64(rate) * du.Seconds())
	var sent atomic.Int64
	base := vegeta.NewStaticTargeter(vegeta.Target{Method: "GET", URL: target})
	tr := func(t *vegeta.Target) error {
		if sent.Add(1) > limit {
			return vegeta.ErrNoTargets
		}
		return base(t)
	}
	atk := vegeta.NewAttacker(vegeta.Client(hc), vegeta.Workers(uint64(min(conns, 8))), vegeta.MaxWorkers(uint64(conns)), vegeta.MaxBody(1<<20))
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	var out []sample
	for r := range atk.Attack(tr, vegeta.Rate{Freq: rate, Per: time.Second}, du, "") {
		if r.Error == vegeta.ErrNoTargets.Error() {
			continue
		}
		out = append(out, sample{lat: r.Latency, code: r.Code})
	}
	return out
}

func summarise(ss []sample) ClientStats {
	c := ClientStats{Sent: len(ss), Codes: map[string]int{}}
	var all, ok []time.Duration
	for _, s := range ss {
		c.Codes[strconv.Itoa(int(s.code))]++
		all = append(all, s.lat)
		switch {
		case s.code >= 200 && s.code < 300:
			c.OK++
			ok = append(ok, s.lat)
		case s.code == http.StatusTooManyRequests:
			c.Denied++
		default:
			c.Other++
		}
	}
	c.All, c.Allowed = pcts(all), pcts(ok)
	return c
}

// probe is what runPhase and runSweep measure around an interval.
type probe struct {
	at          time.Time
	server      ServerStats
	store, self int64
	busy, total int64
}

func (env *floodEnv) probe(s *server) (probe, error) {
	p := probe{at: time.Now(), self: processCPU()}
	p.busy, p.total = hostCPU()
	if env.storePID != 0 {
		p.store, _ = pidCPU(env.storePID)
	}
	var err error
	p.server, err = s.stats()
	return p, err
}

func (env *floodEnv) runPhase(ctx context.Context, spec phaseSpec) (FloodPhase, serverReady, error) {
	ph := FloodPhase{ID: spec.id, Label: spec.label, Policy: spec.policy}
	if why := available(spec); why != "" {
		ph.Unavailable = why
		return ph, serverReady{}, nil
	}
	s, err := env.start(ctx, spec)
	if err != nil {
		return ph, serverReady{}, err
	}
	defer s.stop()
	target := "http://" + s.ready.API + "/search?q=" + url.QueryEscape(searchQuery)

	floodHC := loopbackClient(floodAddr, floodConns)
	legitHC := loopbackClient(legitAddr, 8)
	if spec.signedClient {
		legitHC = (&client.Transport{Base: legitHC.Transport, NoWait: true, MaxRetries: 2}).Client()
		legitHC.Timeout = requestTimeout
	}
	// One request each warms the connections (and, for signed, gets the
	// legitimate client its first token).
	for _, hc := range []*http.Client{floodHC, legitHC} {
		if resp, err := hc.Get(target); err == nil {
			resp.Body.Close()
		}
	}
	time.Sleep(2 * time.Second) // let the warm-up's burst refill

	if err := s.reset(); err != nil {
		return ph, s.ready, err
	}
	before, err := env.probe(s)
	if err != nil {
		return ph, s.ready, err
	}
	var wg sync.WaitGroup
	var floodS, legitS []sample
	wg.Add(2)
	go func() { defer wg.Done(); floodS = attack(ctx, floodHC, target, floodRate, env.o.phase, floodConns) }()
	go func() { defer wg.Done(); legitS = attack(ctx, legitHC, target, legitRate, env.o.phase, 8) }()
	wg.Wait()
	after, err := env.probe(s)
	if err != nil {
		return ph, s.ready, err
	}
	if err := ctx.Err(); err != nil {
		return ph, s.ready, err
	}
	wall := after.at.Sub(before.at).Seconds()
	ph.Seconds = wall
	ph.Flood, ph.Legit = summarise(floodS), summarise(legitS)
	ph.ServerCPU = float64(after.server.CPUns-before.server.CPUns) / 1e9 / wall
	ph.LoadgenCPU = float64(after.self-before.self) / 1e9 / wall
	ph.StoreCPU = float64(after.store-before.store) / 1e9 / wall
	if dt := after.total - before.total; dt > 0 {
		ph.HostBusy = float64(after.busy-before.busy) / float64(dt)
	}
	ph.Requests = map[string]int64{}
	for k, v := range after.server.Requests {
		ph.Requests[k] = v - before.server.Requests[k]
	}
	ph.AllowedCalls = after.server.Calls["allowed"].Sub(before.server.Calls["allowed"])
	ph.DeniedCalls = after.server.Calls["denied"].Sub(before.server.Calls["denied"])
	ph.AllCalls = after.server.All.Sub(before.server.All)
	ph.Limiter = after.server.Limiter
	if after.server.GOMAXPROCS != serverProcs {
		return ph, s.ready, fmt.Errorf("server ran with GOMAXPROCS=%d, want %d", after.server.GOMAXPROCS, serverProcs)
	}
	return ph, s.ready, nil
}

// runSweep offers spec's server one client's load at each of sweepRates,
// each step from a fresh loopback address (so each starts with a full
// quota), and records the admitted rate.
func (env *floodEnv) runSweep(ctx context.Context, spec phaseSpec) (*SweepSeries, error) {
	if available(spec) != "" {
		return nil, nil
	}
	s, err := env.start(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	target := "http://" + s.ready.API + "/search?q=" + url.QueryEscape(searchQuery)
	series := &SweepSeries{ID: spec.id, Label: spec.label}
	for i, rate := range sweepRates {
		hc := loopbackClient("127.0.1."+strconv.Itoa(i+1), floodConns)
		before, err := env.probe(s)
		if err != nil {
			return nil, err
		}
		ss := attack(ctx, hc, target, rate, env.o.step, floodConns)
		after, err := env.probe(s)
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		st := summarise(ss)
		pt := SweepPoint{Offered: float64(rate), Sent: st.Sent, Admitted: float64(st.OK) / env.o.step.Seconds(),
			Denied: st.Denied, Other: st.Other, P50ms: st.All.P50,
			ServerCPU: float64(after.server.CPUns-before.server.CPUns) / 1e9 / after.at.Sub(before.at).Seconds()}
		series.Points = append(series.Points, pt)
		logf("sweep: %-14s offered %5d/s admitted %7.1f/s (429: %d, other: %d) p50 %.0f ms, server CPU %.0f%%",
			spec.id, rate, pt.Admitted, pt.Denied, pt.Other, pt.P50ms, 100*pt.ServerCPU)
	}
	return series, nil
}
