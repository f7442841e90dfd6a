package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/internal/apigwlocal"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/dynamodb/kv"
	"github.com/edgelimit/edgelimit/setup/memory"
	"github.com/edgelimit/edgelimit/setup/signed"
)

// floodServerCmd is the hidden subcommand the flood part starts as its
// server process: the search handler behind the same wiring as `edgelimit
// serve` (setup.Limiters, edgelimit.New, middleware.HTTPAPI, apigwlocal),
// with its DynamoDB calls counted per request, and an admin listener for
// the counts and the process's CPU time.
const floodServerCmd = "flood-server"

// searchQuery is what every client searches for: a phrase about 1 product
// in 300 has, so nearly every record is scanned to its end, as an unindexed
// LIKE '%…%' does.
const searchQuery = "walnut kettle"

// serverReady is the first line the server prints on stdout.
type serverReady struct {
	API   string `json:"api"`
	Admin string `json:"admin"`
	// SearchCPUms is the CPU time of one search, measured at start-up.
	SearchCPUms float64 `json:"search_cpu_ms"`
	// CorpusBytes is the size of the scanned text.
	CorpusBytes int `json:"corpus_bytes"`
}

// ServerStats is the admin listener's answer.
type ServerStats struct {
	CPUns      int64 `json:"cpu_ns"`
	GOMAXPROCS int   `json:"gomaxprocs"`
	NumGC      uint32
	// Requests by outcome: allowed (2xx), denied (429), other.
	Requests map[string]int64 `json:"requests"`
	// Calls are the DynamoDB calls made while answering requests of each
	// outcome; All counts every call, including any made outside a request.
	Calls map[string]Snapshot `json:"calls"`
	All   Snapshot            `json:"all"`
	// Limiter reports the engine's policy decisions since the last reset.
	Limiter LimiterStats `json:"limiter"`
}

// LimiterStats are the engine's policy decisions (edgelimit.Event) since
// the admin listener's last POST /reset.
type LimiterStats struct {
	Decisions int64 `json:"decisions"`
	// Degraded decisions were made by on_store_error because the store
	// failed (an error or the store call's time budget ran out).
	Degraded    int64  `json:"degraded"`
	StoreErrors int64  `json:"store_errors"`
	ErrorSample string `json:"error_sample,omitempty"`
	// P50us and P99us are the limiter's latency (store call included).
	P50us float64 `json:"p50_us"`
	P99us float64 `json:"p99_us"`
}

// observer collects edgelimit.Events.
type observer struct {
	mu  sync.Mutex
	st  LimiterStats
	lat []time.Duration
}

func (o *observer) observe(ev edgelimit.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.st.Decisions++
	if ev.Degraded {
		o.st.Degraded++
	}
	if ev.StoreError != nil {
		o.st.StoreErrors++
		if o.st.ErrorSample == "" {
			o.st.ErrorSample = ev.StoreError.Error()
		}
	}
	if len(o.lat) < 1<<20 {
		o.lat = append(o.lat, ev.Latency)
	}
}

func (o *observer) reset() {
	o.mu.Lock()
	o.st, o.lat = LimiterStats{}, o.lat[:0]
	o.mu.Unlock()
}

func (o *observer) stats() LimiterStats {
	o.mu.Lock()
	st := o.st
	lat := slices.Clone(o.lat)
	o.mu.Unlock()
	slices.Sort(lat)
	st.P50us, st.P99us = micros(percentile(lat, 0.50)), micros(percentile(lat, 0.99))
	return st
}

func runFloodServer(args []string) int {
	fs := flag.NewFlagSet(floodServerCmd, flag.ContinueOnError)
	policies := fs.String("policies", "", "policy file; empty: no limiter")
	endpoint := fs.String("dynamodb-endpoint", "", "DynamoDB endpoint; empty: memory stores")
	table := fs.String("table", "", "DynamoDB table")
	records := fs.Int("records", handlers.DefaultSearchRecords, "products in the search corpus")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := serveFlood(*policies, *endpoint, *table, *records); err != nil {
		fmt.Fprintln(os.Stderr, "flood-server:", err)
		return 1
	}
	return 0
}

func serveFlood(policies, endpoint, table string, records int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	search := handlers.NewSearch(handlers.Deps{Logger: quiet}, handlers.SearchConfig{Records: records})
	h := search
	all := NewTally()
	obs := &observer{}
	if policies != "" {
		pf, err := policy.Load(policies)
		if err != nil {
			return err
		}
		backends := []setup.Backend{memory.Durable(), memory.KV()}
		if endpoint != "" {
			client, tally, err := countingClient(ctx, endpoint)
			if err != nil {
				return err
			}
			all = tally
			cfg := dynamodb.Config{Client: client, Table: table}
			backends = []setup.Backend{durable.Backend(cfg), kv.Backend(cfg)}
		}
		keys, err := benchKeyRing()
		if err != nil {
			return err
		}
		backends = append(backends, signed.WithKeys(keys))
		factory, err := setup.Limiters(pf, backends, setup.BackendEnv{Logger: quiet})
		if err != nil {
			return err
		}
		engine, err := edgelimit.New(edgelimit.Config{Policies: pf, Limiters: factory, HashSecret: benchSecret, Logger: quiet, Observe: obs.observe})
		if err != nil {
			return err
		}
		h = middleware.HTTPAPI(engine, search)
	}
	api, err := apigwlocal.New(apigwlocal.Config{Handler: apigwlocal.Handler(h), Logger: quiet})
	if err != nil {
		return err
	}
	acct := &accounting{next: api, calls: map[string]*Tally{}, requests: map[string]int64{}}
	for _, c := range []string{"allowed", "denied", "other"} {
		acct.calls[c] = NewTally()
	}

	ready := serverReady{SearchCPUms: searchCost(search), CorpusBytes: handlers.NewCorpus(records, 0).Size()}
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ready.API, ready.Admin = apiLn.Addr().String(), adminLn.Addr().String()

	admin := http.NewServeMux()
	admin.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		st := acct.stats(all)
		st.Limiter = obs.stats()
		_ = json.NewEncoder(w).Encode(st)
	})
	admin.HandleFunc("POST /reset", func(w http.ResponseWriter, r *http.Request) { obs.reset() })
	apiSrv := &http.Server{Handler: acct, ReadHeaderTimeout: 10 * time.Second}
	adminSrv := &http.Server{Handler: admin, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = apiSrv.Serve(apiLn) }()
	go func() { _ = adminSrv.Serve(adminLn) }()
	if err := json.NewEncoder(os.Stdout).Encode(ready); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = apiSrv.Shutdown(sctx)
	_ = adminSrv.Shutdown(sctx)
	return nil
}

// searchCost returns the CPU milliseconds of one search request: the mean
// of 40, after 5 for warm-up.
func searchCost(h middleware.HTTPAPIHandler) float64 {
	ev := events.APIGatewayV2HTTPRequest{
		RawPath:               "/search",
		QueryStringParameters: map[string]string{"q": searchQuery},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: "/search", SourceIP: "127.0.0.1"},
		},
	}
	for range 5 {
		_, _ = h(context.Background(), ev)
	}
	const n = 40
	c0 := processCPU()
	for range n {
		_, _ = h(context.Background(), ev)
	}
	return float64(processCPU()-c0) / n / 1e6
}

// processCPU returns the user and system CPU time this process has used.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// accounting counts requests by outcome and the store calls each made.
type accounting struct {
	next     http.Handler
	mu       sync.Mutex
	requests map[string]int64
	calls    map[string]*Tally
}

func (a *accounting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := NewTally()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	a.next.ServeHTTP(sw, r.WithContext(withTally(r.Context(), t)))
	class := "other"
	switch {
	case sw.status >= 200 && sw.status < 300:
		class = "allowed"
	case sw.status == http.StatusTooManyRequests:
		class = "denied"
	}
	a.mu.Lock()
	a.requests[class]++
	a.mu.Unlock()
	a.calls[class].merge(t.Snapshot())
}

func (a *accounting) stats(all *Tally) ServerStats {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := ServerStats{CPUns: processCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumGC: ms.NumGC,
		Requests: map[string]int64{}, Calls: map[string]Snapshot{}, All: all.Snapshot()}
	a.mu.Lock()
	for k, v := range a.requests {
		st.Requests[k] = v
	}
	a.mu.Unlock()
	for k, t := range a.calls {
		st.Calls[k] = t.Snapshot()
	}
	return st
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}
