package main

// The middleware part: one request through each rate limiter's own
// net/http middleware, around the same trivial handler, the cost each adds
// to a request net of the handler. It answers "what does putting this in
// front of my handler cost", where the decisions part answers "what does a
// decision cost".

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/policy"
)

const (
	// mwProcs is the GOMAXPROCS of the part: the parallel cells are
	// b.RunParallel with this many goroutines.
	mwProcs = 2
	// mwPath is the one route every stack serves.
	mwPath = "/v1/items"
	// mwKeyHeader carries the client key every row limits by.
	mwKeyHeader = "X-Api-Key"
	// mwWindow is every quota's period, and mwWindowText the same as a
	// policy file writes it. Long, because edgelimit's fixed windows are
	// aligned to the Unix epoch: a boundary inside the part would give every
	// key of a denied cell a fresh quota (an hourly window did, once, and the
	// cell's unexpected count showed it). A 30-day boundary falls inside a
	// few minutes' run about once in ten thousand; the count still shows it.
	mwWindow     = 30 * 24 * time.Hour
	mwWindowText = "30d"
	// mwAllowLimit is the quota of the allowed cells, per mwWindow: far more
	// than a run can spend, so no allowed cell meets a denial.
	mwAllowLimit = 1_000_000_000
	// mwDenyLimit is the quota of the denied cells: one request per window,
	// which the warm-up spends for every key, so every timed request is a
	// repeat offender's.
	mwDenyLimit = 1
	// mwBody is the handler's response body.
	mwBody = `{"id":"item-1","ok":true}`
	// mwDefaultCount is the runs of each cell, as the issue measured.
	mwDefaultCount = 6
)

// The cells of a row. A baseline row has the serial and parallel cells only.
const (
	cellAllowedSerial   = "allowed-serial"
	cellAllowedParallel = "allowed-parallel"
	cellDeniedParallel  = "denied-parallel"
	cellSerial          = "serial"
	cellParallel        = "parallel"
)

// The baselines every figure is net of: the handler with the recorder (what
// an allowed request runs besides the middleware), and the recorder alone
// (what a denied request runs besides it: the handler does not run).
const (
	baseHTTPHandler   = "http-handler"
	baseHTTPEmpty     = "http-empty"
	baseLambdaHandler = "lambda-handler"
	baseLambdaEmpty   = "lambda-empty"
)

var mwBodyBytes = []byte(mwBody)

// MiddlewareData is the result of the middleware part.
type MiddlewareData struct {
	Keys       int    `json:"keys"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Benchtime  string `json:"benchtime"`
	Count      int    `json:"count"`
	// AllowLimit and DenyLimit are the quotas, per Window, of the allowed
	// and the denied cells.
	AllowLimit int64         `json:"allow_limit"`
	DenyLimit  int64         `json:"deny_limit"`
	Window     time.Duration `json:"window_ns"`
	Baselines  []MWRow       `json:"baselines"`
	Rows       []MWRow       `json:"rows"`
}

// MWRow is one stack's cells.
type MWRow struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Group is "edgelimit", "peer", "reference" (edgelimit's Lambda
	// adapter) or "baseline".
	Group string `json:"group"`
	// Adapter is "net/http" or "lambda": which baselines apply.
	Adapter string `json:"adapter"`
	Setup   string `json:"setup"`
	// Allowed and Denied describe one response of each kind, as sent by
	// the stack after its warm-up.
	Allowed     *MWResponse        `json:"allowed,omitempty"`
	Denied      *MWResponse        `json:"denied,omitempty"`
	Cells       map[string]*MWCell `json:"cells,omitempty"`
	Unavailable string             `json:"unavailable,omitempty"`
}

// MWResponse is what one response carried.
type MWResponse struct {
	Status int `json:"status"`
	// Headers are the header names of the response, sorted.
	Headers     []string `json:"headers"`
	ContentType string   `json:"content_type"`
	BodyBytes   int      `json:"body_bytes"`
}

// MWCell is one cell: the median of Count runs of the whole stack (Gross)
// and the same net of its baseline.
type MWCell struct {
	Gross BenchStat `json:"gross"`
	// Baseline names the baseline row and cell subtracted; Net is the
	// difference (nil for a baseline row).
	Baseline string `json:"baseline,omitempty"`
	Net      *MWNet `json:"net,omitempty"`
	// CPUNsPerOp is the process's CPU time (every thread, the garbage
	// collector included) per request while the timed loops ran, over every
	// run: less sensitive than ns/op to other processes on the machine.
	CPUNsPerOp float64 `json:"cpu_ns_per_op"`
	// StoreCallsPerOp counts calls to the row's KV per request, for the rows
	// that have one to count (edgelimit kv).
	StoreCallsPerOp *float64 `json:"store_calls_per_op,omitempty"`
}

// MWNet is a cell's cost net of its baseline.
type MWNet struct {
	NsPerOp     float64 `json:"ns_per_op"`
	AllocsPerOp int64   `json:"allocs_per_op"`
	BytesPerOp  int64   `json:"bytes_per_op"`
}

// mwTarget is one stack under test.
type mwTarget struct {
	// newClient returns a function that sends one request for key through
	// the stack and returns the response's status. Each goroutine gets its
	// own, with its own request and response writer, reused request after
	// request as a server reuses its buffers.
	newClient func() func(key string) int
	// probe sends one request for key and describes the response.
	probe func(key string) MWResponse
	// calls, if set, returns the store calls made so far.
	calls func() int64
	// close, if set, stops the stack's background work.
	close func()
	// settle, if set, runs after the warm-up: it brings the stack to the
	// state its timed loops measure, sending every stored key once and
	// expecting want.
	settle func(stored []string, want int) error
}

// mwSpec is one row of the comparison: build returns its stack with a
// quota of limit per mwWindow, sized for keys clients.
type mwSpec struct {
	id, name, group, adapter, setup string
	build                           func(limit int64, keys int) (*mwTarget, error)
}

// mwKeys returns n distinct API keys as the warm-up sends them, and fresh
// copies of the same keys in one fixed shuffled order, as the timed loops
// send them: every row sees the same keys in the same order, and no request
// shares its key's memory with the key a limiter stored.
func mwKeys(n int) (stored, seq []string) {
	r := rand.New(rand.NewPCG(16, 100_000))
	stored = make([]string, n)
	for i := range stored {
		stored[i] = fmt.Sprintf("ak_%016x%016x", r.Uint64(), r.Uint64())
	}
	seq = make([]string, n)
	for i, j := range r.Perm(n) {
		seq[i] = strings.Clone(stored[j])
	}
	return stored, seq
}

// recorder is the cheap http.ResponseWriter every net/http row writes to:
// it keeps the header, the status and the body's length, and is reset
// between requests (the header map keeps its memory, as a server's does).
type recorder struct {
	h    http.Header
	code int
	n    int
}

func newRecorder() *recorder { return &recorder{h: http.Header{}} }

func (w *recorder) Header() http.Header { return w.h }

func (w *recorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.n += len(b)
	return len(b), nil
}

func (w *recorder) reset() {
	clear(w.h)
	w.code, w.n = 0, 0
}

// status is the status the response would have: 200 when the handler
// wrote nothing, as net/http sends.
func (w *recorder) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// mwHandler is the handler every net/http row wraps: a small JSON body and
// its Content-Type.
var mwHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(mwBodyBytes)
})

// mwLambdaHeaders is the Lambda handler's response header map, shared as a
// handler's constant headers would be (the adapter copies it to add its own).
var mwLambdaHeaders = map[string]string{"Content-Type": "application/json"}

// mwLambdaHandler is the same handler for the Lambda adapter.
func mwLambdaHandler(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusOK, Headers: mwLambdaHeaders, Body: mwBody}, nil
}

// newMWRequest is one client's request: GET /v1/items with an API key.
func newMWRequest() *http.Request {
	r, err := http.NewRequest(http.MethodGet, "https://api.example.com"+mwPath, nil)
	if err != nil {
		panic(err)
	}
	r.RemoteAddr = "198.51.100.7:52000"
	r.Header.Set("User-Agent", "bench/1.0")
	r.Header.Set("Accept", "application/json")
	r.Header.Set(mwKeyHeader, "")
	return r
}

// newMWEvent is the same request as an API Gateway HTTP API (v2) event.
func newMWEvent() events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "$default", RawPath: mwPath,
		Headers: map[string]string{
			"host": "api.example.com", "user-agent": "bench/1.0", "accept": "application/json",
			strings.ToLower(mwKeyHeader): "",
		},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: "$default", Stage: "$default", DomainName: "api.example.com",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: http.MethodGet, Path: mwPath, Protocol: "HTTP/1.1", SourceIP: "198.51.100.7", UserAgent: "bench/1.0",
			},
		},
	}
}

// httpTarget is a net/http stack.
func httpTarget(h http.Handler) *mwTarget {
	return &mwTarget{
		newClient: func() func(string) int {
			r, w := newMWRequest(), newRecorder()
			keys := r.Header[mwKeyHeader]
			return func(key string) int {
				keys[0] = key
				w.reset()
				h.ServeHTTP(w, r)
				return w.status()
			}
		},
		probe: func(key string) MWResponse {
			r, w := newMWRequest(), newRecorder()
			r.Header.Set(mwKeyHeader, key)
			h.ServeHTTP(w, r)
			resp := MWResponse{Status: w.status(), ContentType: w.h.Get("Content-Type"), BodyBytes: w.n}
			for k := range w.h {
				resp.Headers = append(resp.Headers, k)
			}
			slices.Sort(resp.Headers)
			return resp
		},
	}
}

// lambdaTarget is a Lambda (API Gateway v2) stack.
func lambdaTarget(h func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)) *mwTarget {
	keyName := strings.ToLower(mwKeyHeader)
	return &mwTarget{
		newClient: func() func(string) int {
			ev, ctx := newMWEvent(), context.Background()
			return func(key string) int {
				ev.Headers[keyName] = key
				resp, err := h(ctx, ev)
				if err != nil {
					return -1
				}
				return resp.StatusCode
			}
		},
		probe: func(key string) MWResponse {
			ev := newMWEvent()
			ev.Headers[keyName] = key
			resp, err := h(context.Background(), ev)
			if err != nil {
				return MWResponse{Status: -1}
			}
			out := MWResponse{Status: resp.StatusCode, BodyBytes: len(resp.Body)}
			for k, v := range resp.Headers {
				out.Headers = append(out.Headers, k)
				if strings.EqualFold(k, "Content-Type") {
					out.ContentType = v
				}
			}
			slices.Sort(out.Headers)
			return out
		},
	}
}

// mwBaselineSpecs are the baseline rows. Their limit is ignored.
func mwBaselineSpecs() []mwSpec {
	return []mwSpec{
		{id: baseHTTPHandler, name: "net/http: handler + recorder alone", group: "baseline", adapter: "net/http",
			setup: "the handler (Content-Type and a 25-byte JSON body) called directly with the reused request and recorder",
			build: func(int64, int) (*mwTarget, error) { return httpTarget(mwHandler), nil }},
		{id: baseHTTPEmpty, name: "net/http: empty handler + recorder", group: "baseline", adapter: "net/http",
			setup: "an empty handler with the reused request and recorder: the loop, the key and the reset, which a denial runs without the handler",
			build: func(int64, int) (*mwTarget, error) {
				return httpTarget(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), nil
			}},
		{id: baseLambdaHandler, name: "Lambda: handler alone", group: "baseline", adapter: "lambda",
			setup: "the Lambda handler (a response with a shared Content-Type header map and the body) called directly with the event",
			build: func(int64, int) (*mwTarget, error) { return lambdaTarget(mwLambdaHandler), nil }},
		{id: baseLambdaEmpty, name: "Lambda: empty handler", group: "baseline", adapter: "lambda",
			setup: "a handler returning a bare 200, called directly with the event: what a denial runs without the handler",
			build: func(int64, int) (*mwTarget, error) {
				return lambdaTarget(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
					return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusOK}, nil
				}), nil
			}},
	}
}

// mwPolicy is the policy file of edgelimit's rows: one policy on the route,
// keyed by the API key. Its store_timeout is the longest a policy may have
// (30 s) instead of the default 100 ms: on a machine this loaded, a
// goroutine can wait longer than 100 ms for a core, and an in-memory store
// call then fails its budget and on_store_error (allow) answers instead of
// the limiter — which once gave a denied stack's warm-up a 200. The peers
// have no budget at all.
func mwPolicy(strategy string, limit int64, extra string) string {
	return fmt.Sprintf("version: 1\npolicies:\n  - {name: bench, routes: [\"GET %s\"], key: \"header:%s\", strategy: %s, limit: %d, window: %s, store_timeout: 30s%s}\n",
		mwPath, mwKeyHeader, strategy, limit, mwWindowText, extra)
}

// countingKV is a KV and the kv buckets built on it, whose calls to it it
// counts from their Stats (kvbucket.KV is sealed: a wrapper cannot count
// them): reads, applied writes and rejected conditional writes; the memory
// KV never fails a call.
type countingKV struct {
	kvbucket.KV
	mu      sync.Mutex
	buckets []*kvbucket.Bucket
}

// InProcess forwards what the counted KV says of itself (a Memory: its
// state never leaves the process), so that the engine hashes the kv rows'
// keys as it would without the counter.
func (c *countingKV) InProcess() bool {
	ip, ok := c.KV.(edgelimit.InProcess)
	return ok && ip.InProcess()
}

// factory returns a factory of kv buckets on c's KV (see memoryBuckets)
// that c counts.
func (c *countingKV) factory(cacheKeys int, noCache bool, now func() time.Time) limiterFactory {
	build := memoryBuckets(c.KV, cacheKeys, noCache, now)
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		l, err := build(p)
		if b, ok := l.(*kvbucket.Bucket); ok {
			c.mu.Lock()
			c.buckets = append(c.buckets, b)
			c.mu.Unlock()
		}
		return l, err
	}
}

// calls returns the KV calls of c's buckets so far.
func (c *countingKV) calls() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for _, b := range c.buckets {
		st := b.Stats()
		n += st.Reads + st.Writes + st.Rejected
	}
	return int64(n)
}

// mwSpecs are the rows of the comparison, edgelimit's first.
func mwSpecs() []mwSpec {
	return []mwSpec{
		{
			id: "edgelimit-fixed-window", name: "edgelimit fixed-window (durable, memory store), middleware.Handler", group: "edgelimit", adapter: "net/http",
			setup: "policy `key: header:X-Api-Key, strategy: durable` (fixed-window) on `GET /v1/items`; durablecounter on a durablecounter.Memory (64 shards, the default); engine with its in-process key hash (SipHash-2-4: the store is in process memory, edgelimit.InProcess); RateLimit headers and the legacy X-RateLimit-* (the default); `deny_cache` at its default (on), which a Counter on a Memory store does not need and does not keep: the store answers a repeat denial itself; `store_timeout: 30s` (so that a busy machine never turns a decision into on_store_error's)",
			build: func(limit int64, _ int) (*mwTarget, error) {
				pf, err := parsePolicies(mwPolicy("durable", limit, ""))
				if err != nil {
					return nil, err
				}
				e, err := newEngine(pf, memoryCounters())
				if err != nil {
					return nil, err
				}
				return httpTarget(httpMiddleware(e, mwHandler)), nil
			},
		},
		{
			id: "edgelimit-kv", name: "edgelimit kv (memory KV), middleware.Handler", group: "edgelimit", adapter: "net/http",
			setup: "policy `key: header:X-Api-Key, strategy: kv` (token bucket, burst = limit, sync_interval 1 s, the default) on `GET /v1/items`; kvbucket on a Memory KV, process cache of 200,000 keys; engine as above. A key comes back once per pass over the keys; a pass that takes longer than sync_interval (the KV calls per request below show whether it did) finds every key due for a sync, one KV update per decision",
			build: kvRow(""),
		},
		{
			id: "go-limiter", name: "sethvargo/go-limiter httplimit (memorystore)", group: "peer", adapter: "net/http",
			setup: "`memorystore.New(Tokens: limit, Interval: 30 days)`, `httplimit.NewMiddleware(store, KeyFunc: r.Header.Get(\"X-Api-Key\"))`; denial: `http.Error` 429",
			build: func(limit int64, _ int) (*mwTarget, error) {
				st, err := memorystore.New(&memorystore.Config{Tokens: uint64(limit), Interval: mwWindow})
				if err != nil {
					return nil, err
				}
				m, err := httplimit.NewMiddleware(st, func(r *http.Request) (string, error) { return r.Header.Get(mwKeyHeader), nil })
				if err != nil {
					return nil, err
				}
				t := httpTarget(m.Handle(mwHandler))
				t.close = func() { _ = st.Close(context.Background()) }
				return t, nil
			},
		},
		{
			id: "throttled", name: "throttled/v2 GCRA, HTTPRateLimiterCtx (memstore)", group: "peer", adapter: "net/http",
			setup: "`memstore.NewCtx(0)` (an unbounded map), `NewGCRARateLimiterCtx(store, RateQuota{PerDuration(limit, 30 days), MaxBurst: limit-1})`, `HTTPRateLimiterCtx{VaryBy: &VaryBy{Headers: [X-Api-Key]}}`; denial: its DefaultDeniedHandler (`http.Error` 429)",
			build: func(limit int64, _ int) (*mwTarget, error) {
				st, err := throttledmem.NewCtx(0)
				if err != nil {
					return nil, err
				}
				rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerDuration(int(limit), mwWindow), MaxBurst: int(limit) - 1})
				if err != nil {
					return nil, err
				}
				h := &throttled.HTTPRateLimiterCtx{RateLimiter: rl, VaryBy: &throttled.VaryBy{Headers: []string{mwKeyHeader}}}
				return httpTarget(h.RateLimit(mwHandler)), nil
			},
		},
		{
			id: "ulule", name: "ulule/limiter v3 stdlib middleware (memory store)", group: "peer", adapter: "net/http",
			setup: "`memory.NewStore()` (its defaults: prefix `limiter`, clean-up every 30 s), `limiter.New(store, Rate{Period: 30 days, Limit: limit})`, `stdlib.NewMiddleware(WithKeyGetter(r.Header.Get(\"X-Api-Key\")))`; a fixed window; denial: its default `http.Error` 429",
			build: func(limit int64, _ int) (*mwTarget, error) {
				l := ulule.New(ululemem.NewStore(), ulule.Rate{Period: mwWindow, Limit: limit})
				m := stdlib.NewMiddleware(l, stdlib.WithKeyGetter(func(r *http.Request) string { return r.Header.Get(mwKeyHeader) }))
				return httpTarget(m.Handler(mwHandler)), nil
			},
		},
		{
			id: "x-time-rate", name: "x/time/rate in a map + mutex, one header", group: "peer", adapter: "net/http",
			setup: "hand-written: a `rate.Limiter(limit per 30 days, burst limit)` per key in a map under a `sync.Mutex`; allowed: sets X-RateLimit-Remaining; denied: Retry-After (a constant from the quota) and `http.Error` 429",
			build: func(limit int64, _ int) (*mwTarget, error) {
				return httpTarget(newXRateMiddleware(limit, mwHandler)), nil
			},
		},
		{
			id: "edgelimit-kv-cached", name: "edgelimit kv, sync_interval 1h (decided from the process cache), middleware.Handler", group: "reference", adapter: "net/http",
			setup: "the kv row with `sync_interval: 1h`, brought past every key's first sync interval before the timed loops (its engine's clock, which the buckets decide at as a deployed function's do, moved an hour and a minute ahead after the warm-up, then one pass that syncs each key and grants this instance, its only writer, the whole bucket for the hour): every timed decision is the process cache's, as for a hot key; shows the engine and adapter around a decision that costs no KV call (without the clock move every decision would be a reservation of a key's first interval, one KV call each)",
			build: kvSettledRow,
		},
		{
			id: "edgelimit-fixed-window-bare", name: "edgelimit fixed-window (durable, memory store), middleware.Handler with WithoutVerdictContext", group: "reference", adapter: "net/http",
			setup: "the first row with `middleware.WithoutVerdictContext()`: the handler does not look its verdict up (edgelimit.FromContext), so the request goes to it as it came, without the copy `r.WithContext` makes (the peers pass no value to the handler either)",
			build: func(limit int64, _ int) (*mwTarget, error) {
				pf, err := parsePolicies(mwPolicy("durable", limit, ""))
				if err != nil {
					return nil, err
				}
				e, err := newEngine(pf, memoryCounters())
				if err != nil {
					return nil, err
				}
				return httpTarget(httpMiddlewareBare(e, mwHandler)), nil
			},
		},
		{
			id: "edgelimit-fixed-window-lambda", name: "edgelimit fixed-window (durable, memory store), middleware.HTTPAPI (Lambda)", group: "reference", adapter: "lambda",
			setup: "the first row's engine behind the Lambda adapter: an API Gateway v2 event in, an APIGatewayV2HTTPResponse out (its headers a new map: the handler's and the verdict's); net of the Lambda handler alone",
			build: func(limit int64, _ int) (*mwTarget, error) {
				pf, err := parsePolicies(mwPolicy("durable", limit, ""))
				if err != nil {
					return nil, err
				}
				e, err := newEngine(pf, memoryCounters())
				if err != nil {
					return nil, err
				}
				return lambdaTarget(httpAPIMiddleware(e, mwLambdaHandler)), nil
			},
		},
	}
}

// kvRow builds edgelimit's kv rows: the policy with extra fields, on a
// Memory KV that counts its calls.
func kvRow(extra string) func(limit int64, keys int) (*mwTarget, error) {
	return func(limit int64, keys int) (*mwTarget, error) {
		pf, err := parsePolicies(mwPolicy("kv", limit, extra))
		if err != nil {
			return nil, err
		}
		kv := &countingKV{KV: memoryKV(2 * keys)}
		e, err := newEngine(pf, kv.factory(2*keys, false, nil))
		if err != nil {
			return nil, err
		}
		t := httpTarget(httpMiddleware(e, mwHandler))
		t.calls = kv.calls
		return t, nil
	}
}

// kvSettledRow is the kv row with sync_interval 1h, past every key's first
// sync interval before the timed loops: its engine's clock is the real one
// plus an offset, which settle moves ahead by the interval and a minute
// after the warm-up (so the warm-up's reservations end each key's first
// interval); settle's pass then syncs each key once, which grants this
// instance, the key's only writer, the whole bucket for an hour. Every
// timed decision is the process cache's, with no KV call: a hot key's
// path. (Without settle every decision of the part would be a key's first
// interval's, a reservation in the KV each.) The clock is the engine's, as
// in a deployed function (setup gives a bucket no clock of its own): a
// bucket decides at the request's instant, Request.At, and reads no clock
// of its own, as the durable rows' Counters do. (The engine, on a clock of
// its own, reads time.Now once more for the request's time budget, which
// the durable rows' engine takes from the same reading.)
func kvSettledRow(limit int64, keys int) (*mwTarget, error) {
	const interval = time.Hour
	pf, err := parsePolicies(mwPolicy("kv", limit, ", sync_interval: 1h"))
	if err != nil {
		return nil, err
	}
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	kv := &countingKV{KV: memoryKV(2 * keys)}
	e, err := newEngineAt(pf, kv.factory(2*keys, false, nil), now)
	if err != nil {
		return nil, err
	}
	t := httpTarget(httpMiddleware(e, mwHandler))
	t.calls = kv.calls
	t.settle = func(stored []string, want int) error {
		offset.Add(int64(interval + time.Minute))
		send := t.newClient()
		for _, k := range stored {
			if st := send(k); st != want {
				return fmt.Errorf("settle: key %s answered %d, want %d", k, st, want)
			}
		}
		return nil
	}
	return t, nil
}

// xrateMiddleware is the hand-written baseline of the comparison: what a
// team writes in twenty lines with golang.org/x/time/rate.
type xrateMiddleware struct {
	mu         sync.Mutex
	m          map[string]*rate.Limiter
	limit      rate.Limit
	burst      int
	retryAfter string
	next       http.Handler
}

func newXRateMiddleware(limit int64, next http.Handler) *xrateMiddleware {
	return &xrateMiddleware{
		m:          map[string]*rate.Limiter{},
		limit:      rate.Limit(float64(limit) / mwWindow.Seconds()),
		burst:      int(limit),
		retryAfter: strconv.FormatInt(int64((mwWindow+time.Duration(limit)-1)/time.Duration(limit)/time.Second), 10),
		next:       next,
	}
}

func (x *xrateMiddleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(mwKeyHeader)
	x.mu.Lock()
	l := x.m[key]
	if l == nil {
		l = rate.NewLimiter(x.limit, x.burst)
		x.m[key] = l
	}
	x.mu.Unlock()
	now := time.Now()
	if !l.AllowN(now, 1) {
		w.Header().Set("Retry-After", x.retryAfter)
		http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		return
	}
	w.Header().Set("X-RateLimit-Remaining", strconv.FormatInt(int64(l.TokensAt(now)), 10))
	x.next.ServeHTTP(w, r)
}

// mwBuilt is a row with its stacks built and warmed.
type mwBuilt struct {
	spec            mwSpec
	allowed, denied *mwTarget
	row             MWRow
	runs            map[string][]mwRun
}

// mwRun is one testing.Benchmark run of a cell, with what the cell's
// function counted over every invocation testing.Benchmark made of it.
type mwRun struct {
	res        testing.BenchmarkResult
	ops        int64 // requests sent, every invocation
	unexpected int64
	calls      int64
	cpu        time.Duration
}

// buildRow builds and warms spec's stacks over stored: the allowed stack
// sees every key once (so the timed loops find every key known), the denied
// one sees every key twice, the first admitted and the second denied (so
// every key is over its quota). A stack that answers otherwise is an error:
// the row would not measure what it says.
func buildRow(spec mwSpec, stored []string) (*mwBuilt, error) {
	b := &mwBuilt{spec: spec, runs: map[string][]mwRun{},
		row: MWRow{ID: spec.id, Name: spec.name, Group: spec.group, Adapter: spec.adapter, Setup: spec.setup}}
	var err error
	if b.allowed, err = spec.build(mwAllowLimit, len(stored)); err != nil {
		return nil, err
	}
	send := b.allowed.newClient()
	for _, k := range stored {
		if st := send(k); st != http.StatusOK {
			b.close()
			return nil, fmt.Errorf("warm-up: key %s answered %d, want 200", k, st)
		}
	}
	if spec.group == "baseline" {
		return b, nil
	}
	if s := b.allowed.settle; s != nil {
		if err := s(stored, http.StatusOK); err != nil {
			b.close()
			return nil, err
		}
	}
	a := b.allowed.probe(stored[0])
	b.row.Allowed = &a
	if b.denied, err = spec.build(mwDenyLimit, len(stored)); err != nil {
		b.close()
		return nil, err
	}
	send = b.denied.newClient()
	for _, k := range stored {
		if st := send(k); st != http.StatusOK {
			b.close()
			return nil, fmt.Errorf("warm-up of the denied stack: key %s answered %d first, want 200", k, st)
		}
		if st := send(k); st != http.StatusTooManyRequests {
			b.close()
			return nil, fmt.Errorf("warm-up of the denied stack: key %s answered %d second, want 429", k, st)
		}
	}
	if s := b.denied.settle; s != nil {
		if err := s(stored, http.StatusTooManyRequests); err != nil {
			b.close()
			return nil, err
		}
	}
	d := b.denied.probe(stored[0])
	b.row.Denied = &d
	return b, nil
}

func (b *mwBuilt) close() {
	for _, t := range []*mwTarget{b.allowed, b.denied} {
		if t != nil && t.close != nil {
			t.close()
		}
	}
}

// cells returns the row's cells: name, stack, expected status, parallel.
func (b *mwBuilt) cells() []mwCellSpec {
	if b.spec.group == "baseline" {
		return []mwCellSpec{{cellSerial, b.allowed, http.StatusOK, false}, {cellParallel, b.allowed, http.StatusOK, true}}
	}
	return []mwCellSpec{
		{cellAllowedSerial, b.allowed, http.StatusOK, false},
		{cellAllowedParallel, b.allowed, http.StatusOK, true},
		{cellDeniedParallel, b.denied, http.StatusTooManyRequests, true},
	}
}

type mwCellSpec struct {
	name     string
	t        *mwTarget
	want     int
	parallel bool
}

// mwCounters accumulate over every invocation of a cell's function: the
// requests sent, those answered otherwise than the cell expects, and the
// process's CPU time while the timed loop ran (so not the collection
// testing.Benchmark forces before each round).
type mwCounters struct{ ops, unexpected, cpu atomic.Int64 }

// cellBench is a cell as a benchmark function. Serial: one goroutine sends
// seq in order, round and round. Parallel: b.RunParallel's goroutines each
// send their own contiguous share of seq, so no two send one key at once
// and none waits on another's key.
func cellBench(t *mwTarget, seq []string, want int, parallel bool, c *mwCounters) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		if !parallel {
			send := t.newClient()
			var ops, bad int64
			i := 0
			cpu0 := processCPU()
			defer func() { c.cpu.Add(processCPU() - cpu0) }()
			for b.Loop() {
				if send(seq[i]) != want {
					bad++
				}
				ops++
				if i++; i == len(seq) {
					i = 0
				}
			}
			c.ops.Add(ops)
			c.unexpected.Add(bad)
			return
		}
		var next atomic.Int64
		p := runtime.GOMAXPROCS(0)
		cpu0 := processCPU()
		defer func() { c.cpu.Add(processCPU() - cpu0) }()
		b.RunParallel(func(pb *testing.PB) {
			g := int(next.Add(1)-1) % p
			lo, hi := g*len(seq)/p, (g+1)*len(seq)/p
			send := t.newClient()
			var ops, bad int64
			i := lo
			for pb.Next() {
				if send(seq[i]) != want {
					bad++
				}
				ops++
				if i++; i == hi {
					i = lo
				}
			}
			c.ops.Add(ops)
			c.unexpected.Add(bad)
		})
	}
}

// runCell runs one cell once with testing.Benchmark.
func runCell(cs mwCellSpec, seq []string) mwRun {
	var c mwCounters
	var calls0 int64
	if cs.t.calls != nil {
		calls0 = cs.t.calls()
	}
	res := testing.Benchmark(cellBench(cs.t, seq, cs.want, cs.parallel, &c))
	r := mwRun{res: res, ops: c.ops.Load(), unexpected: c.unexpected.Load(), cpu: time.Duration(c.cpu.Load())}
	if cs.t.calls != nil {
		r.calls = cs.t.calls() - calls0
	}
	return r
}

func runMiddleware(ctx context.Context, o options) (any, error) {
	testing.Init()
	if err := flag.CommandLine.Set("test.benchtime", o.benchT.String()); err != nil {
		return nil, err
	}
	prev := runtime.GOMAXPROCS(mwProcs)
	defer runtime.GOMAXPROCS(prev)

	stored, seq := mwKeys(numKeys)
	var built []*mwBuilt
	defer func() {
		for _, b := range built {
			b.close()
		}
	}()
	data := MiddlewareData{Keys: numKeys, GOMAXPROCS: mwProcs, Benchtime: o.benchT.String(), Count: o.mwCount,
		AllowLimit: mwAllowLimit, DenyLimit: mwDenyLimit, Window: mwWindow}
	specs := append(mwBaselineSpecs(), mwSpecs()...)
	unavailable := map[string]string{}
	for _, s := range specs {
		b, err := buildRow(s, stored)
		if err != nil {
			if s.group == "baseline" {
				return nil, fmt.Errorf("baseline %s: %w", s.id, err)
			}
			unavailable[s.id] = err.Error()
			logf("middleware: %-32s unavailable: %v", s.id, err)
			continue
		}
		built = append(built, b)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	logf("middleware: %d stacks built and warmed; live heap %d MiB", 2*len(built), ms.HeapAlloc>>20)

	// Run 1 of every cell, then run 2 of every cell, and so on: a change in
	// the machine's load during the part spreads over every row instead of
	// landing on a few.
	type job struct {
		b  *mwBuilt
		cs mwCellSpec
	}
	var jobs []job
	for _, b := range built {
		for _, cs := range b.cells() {
			jobs = append(jobs, job{b, cs})
		}
	}
	for rep := range o.mwCount {
		start := time.Now()
		// Each run starts at another cell, so that no row is always last,
		// when the machine has had the longest to get busy.
		for k := range jobs {
			j := jobs[(k+rep*len(jobs)/o.mwCount)%len(jobs)]
			j.b.runs[j.cs.name] = append(j.b.runs[j.cs.name], runCell(j.cs, seq))
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		logf("middleware: run %d of %d took %.0f s, load average %.2f at its end", rep+1, o.mwCount, time.Since(start).Seconds(), loadAvg())
	}

	baselines := map[string]*MWRow{}
	for _, b := range built {
		for _, cs := range b.cells() {
			if b.row.Cells == nil {
				b.row.Cells = map[string]*MWCell{}
			}
			b.row.Cells[cs.name] = summarize(b.runs[cs.name], cs.t.calls != nil)
		}
		if b.spec.group == "baseline" {
			data.Baselines = append(data.Baselines, b.row)
			baselines[b.row.ID] = &data.Baselines[len(data.Baselines)-1]
		}
	}
	for _, s := range specs {
		if s.group == "baseline" {
			continue
		}
		if why, ok := unavailable[s.id]; ok {
			data.Rows = append(data.Rows, MWRow{ID: s.id, Name: s.name, Group: s.group, Adapter: s.adapter, Setup: s.setup, Unavailable: why})
			continue
		}
		i := slices.IndexFunc(built, func(b *mwBuilt) bool { return b.spec.id == s.id })
		row := built[i].row
		for name, c := range row.Cells {
			base, baseCell := mwBaselineOf(row.Adapter, name)
			c.Baseline = base + "/" + baseCell
			c.Net = netOf(c.Gross, baselines[base].Cells[baseCell].Gross)
		}
		data.Rows = append(data.Rows, row)
		as, ap, dp := row.Cells[cellAllowedSerial], row.Cells[cellAllowedParallel], row.Cells[cellDeniedParallel]
		logf("middleware: %-32s net ns/op: allowed serial %6.0f, parallel %6.0f, denied parallel %6.0f; allocs %d / %d, B %d / %d",
			row.ID, as.Net.NsPerOp, ap.Net.NsPerOp, dp.Net.NsPerOp, as.Net.AllocsPerOp, dp.Net.AllocsPerOp, as.Net.BytesPerOp, dp.Net.BytesPerOp)
	}
	return data, nil
}

// mwBaselineOf names the baseline row and cell a cell is net of: an allowed
// request runs the handler, a denied one does not.
func mwBaselineOf(adapter, cell string) (row, baseCell string) {
	handler, empty := baseHTTPHandler, baseHTTPEmpty
	if adapter == "lambda" {
		handler, empty = baseLambdaHandler, baseLambdaEmpty
	}
	switch cell {
	case cellAllowedSerial:
		return handler, cellSerial
	case cellAllowedParallel:
		return handler, cellParallel
	default:
		return empty, cellParallel
	}
}

// summarize is a cell's median over its runs: ns/op, allocs/op and B/op
// each the median of the runs' values (for an even count, the mean of the
// middle two). With counted, the stack's store calls per request too.
func summarize(runs []mwRun, counted bool) *MWCell {
	var ns []float64
	var allocs, bytes []int64
	var ops, bad, calls int64
	var cpu time.Duration
	for _, r := range runs {
		ns = append(ns, float64(r.res.T.Nanoseconds())/float64(r.res.N))
		allocs = append(allocs, r.res.AllocsPerOp())
		bytes = append(bytes, r.res.AllocedBytesPerOp())
		ops += r.ops
		bad += r.unexpected
		calls += r.calls
		cpu += r.cpu
	}
	c := &MWCell{Gross: BenchStat{
		NsPerOp: medianFloat(ns), AllocsPerOp: medianInt(allocs), BytesPerOp: medianInt(bytes),
		N: runs[len(runs)/2].res.N, Runs: ns, Unexpected: bad,
	}}
	if ops > 0 {
		c.CPUNsPerOp = float64(cpu.Nanoseconds()) / float64(ops)
		if counted {
			v := float64(calls) / float64(ops)
			c.StoreCallsPerOp = &v
		}
	}
	return c
}

// netOf is gross minus base.
func netOf(gross, base BenchStat) *MWNet {
	return &MWNet{
		NsPerOp:     gross.NsPerOp - base.NsPerOp,
		AllocsPerOp: gross.AllocsPerOp - base.AllocsPerOp,
		BytesPerOp:  gross.BytesPerOp - base.BytesPerOp,
	}
}

func medianFloat(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func medianInt(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
