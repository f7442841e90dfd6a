package middleware_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"golang.org/x/time/rate"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/middleware"
)

// benchPolicies guards /one/ with one policy and /three/ with three, keyed
// by header, by address and by header again; the limits are high enough
// that every request is allowed, so the benchmarks measure the full path:
// decide, spend, render every header.
const benchPolicies = `
version: 1
policies:
  - name: one
    routes: ["GET /one/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 1000000000
    window: 1h
  - name: three-key
    routes: ["GET /three/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 1000000000
    window: 1h
  - name: three-ip
    routes: ["GET /three/*"]
    key: ip
    strategy: durable
    limit: 1000000000
    window: 1m
  - name: three-day
    routes: ["GET /three/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 1000000000
    window: 24h
  - name: spent
    routes: ["GET /spent/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 1
    window: 24h
`

// reportCPU adds cpu-ns/op to a benchmark: the process's CPU time (every
// thread, the garbage collector included) per operation. On a shared,
// oversubscribed machine it is steadier than ns/op, which also counts the
// time the benchmark waited for a CPU. Call it after b.ReportAllocs, and
// the returned function after the loop.
func reportCPU(b *testing.B) func() {
	start, ok := cpuTime()
	return func() {
		if end, ok2 := cpuTime(); ok && ok2 && b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

// benchClients is how many distinct clients the benchmarks cycle through.
const benchClients = 100_000

var benchKeys, benchIPs = func() ([]string, []string) {
	keys := make([]string, benchClients)
	ips := make([]string, benchClients)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%06d-%x", i, rand.Uint64())
		ips[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	}
	return keys, ips
}()

// jsonHeaders is the handler's response header map, shared: the middleware
// must not write to it.
var jsonHeaders = map[string]string{"Content-Type": "application/json"}

// benchRoutes runs the allowed path with one and three policies, and the
// denied path (every client over its quota: what a flood costs). Each route
// gets its own engine and store, holding one window of each of the 100,000
// clients, so the live heap the garbage collector marks is that route's.
func benchRoutes(b *testing.B, run func(b *testing.B, e *edgelimit.Engine, path string)) {
	for _, r := range []struct{ name, path string }{{"1-policy", "/one/x"}, {"3-policies", "/three/x"}, {"denied", "/spent/x"}} {
		b.Run(r.name, func(b *testing.B) { run(b, benchEngine(b, r.path), r.path) })
	}
}

// benchEngine builds an engine over durablecounter's memory store on the
// real clock and spends one request of every client on path, so the timed
// loop measures steady state.
func benchEngine(b *testing.B, path string) *edgelimit.Engine {
	b.Helper()
	e, _ := buildEngine(b, benchPolicies, nil)
	for i := range benchClients {
		in := edgelimit.Input{Method: "GET", Path: path, SourceIP: benchIPs[i],
			Header: limitertest.Headers{"x-api-key": benchKeys[i]}}
		e.Decide(context.Background(), &in)
	}
	return e
}

func BenchmarkHTTPAPI(b *testing.B) {
	handler := func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: jsonHeaders, Body: `{"ok":true}`}, nil
	}
	sample := decodeSample[events.APIGatewayV2HTTPRequest](b, "apigw-v2-request-no-authorizer.json")
	newEvent := func(path string) events.APIGatewayV2HTTPRequest {
		ev := sample
		ev.Headers = map[string]string{"x-api-key": ""}
		for k, v := range sample.Headers {
			ev.Headers[k] = v
		}
		ev.RawPath, ev.RequestContext.HTTP.Path = path, path
		return ev
	}
	check := func(b *testing.B, resp events.APIGatewayV2HTTPResponse, err error) {
		if err != nil || resp.StatusCode != 200 && resp.StatusCode != 429 || resp.Headers["RateLimit"] == "" {
			b.Fatalf("got %d %v %v", resp.StatusCode, resp.Headers, err)
		}
	}
	benchRoutes(b, func(b *testing.B, e *edgelimit.Engine, path string) {
		h := middleware.HTTPAPI(e, handler)
		b.Run("serial", func(b *testing.B) {
			ev := newEvent(path)
			ctx := context.Background()
			b.ReportAllocs()
			defer reportCPU(b)()
			i := rand.IntN(benchClients)
			for b.Loop() {
				i = (i + 1) % benchClients
				ev.Headers["x-api-key"] = benchKeys[i]
				ev.RequestContext.HTTP.SourceIP = benchIPs[i]
				resp, err := h(ctx, ev)
				check(b, resp, err)
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b)()
			b.RunParallel(func(pb *testing.PB) {
				ev := newEvent(path)
				ctx := context.Background()
				i := rand.IntN(benchClients)
				for pb.Next() {
					i = (i + 1) % benchClients
					ev.Headers["x-api-key"] = benchKeys[i]
					ev.RequestContext.HTTP.SourceIP = benchIPs[i]
					resp, err := h(ctx, ev)
					check(b, resp, err)
				}
			})
		})
	})
}

// discardWriter is a reusable http.ResponseWriter that keeps the header and
// status only.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

func BenchmarkHandler(b *testing.B) {
	ok := []byte(`{"ok":true}`)
	contentType := []string{"application/json"}
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = contentType
		_, _ = w.Write(ok)
	})
	newRequest := func(path string) *http.Request {
		r, err := http.NewRequest("GET", "https://api.example.com"+path, nil)
		if err != nil {
			b.Fatal(err)
		}
		r.Header.Set("User-Agent", "bench/1.0")
		r.Header.Set("Accept", "application/json")
		r.Header.Set("X-Api-Key", "")
		return r
	}
	// One "host:port" per client, built up front as the server would.
	addrs := make([]string, benchClients)
	for i, ip := range benchIPs {
		addrs[i] = ip + ":52000"
	}
	check := func(b *testing.B, w *discardWriter) {
		if w.code != 0 && w.code != 200 && w.code != 429 || w.h["Ratelimit"] == nil {
			b.Fatalf("got %d %v", w.code, w.h)
		}
	}
	benchRoutes(b, func(b *testing.B, e *edgelimit.Engine, path string) {
		h := middleware.Handler(e, handler)
		b.Run("serial", func(b *testing.B) {
			r := newRequest(path)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			defer reportCPU(b)()
			i := rand.IntN(benchClients)
			for b.Loop() {
				i = (i + 1) % benchClients
				r.Header["X-Api-Key"][0] = benchKeys[i]
				r.RemoteAddr = addrs[i]
				clear(w.h)
				w.code = 0
				h.ServeHTTP(w, r)
				check(b, w)
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b)()
			var seed atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				r := newRequest(path)
				w := &discardWriter{h: http.Header{}}
				i := int(seed.Add(7919)) % benchClients
				for pb.Next() {
					i = (i + 1) % benchClients
					r.Header["X-Api-Key"][0] = benchKeys[i]
					r.RemoteAddr = addrs[i]
					clear(w.h)
					w.code = 0
					h.ServeHTTP(w, r)
					check(b, w)
				}
			})
		})
	})
}

// BenchmarkReference is the scale the targets are set against: a bare
// x/time/rate limiter looked up in a mutex-guarded map of 100,000 keys.
func BenchmarkReference(b *testing.B) {
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter, benchClients)
	for _, k := range benchKeys {
		m[k] = rate.NewLimiter(1e6, 1<<30)
	}
	b.ReportAllocs()
	defer reportCPU(b)()
	i := 0
	for b.Loop() {
		i = (i + 1) % benchClients
		mu.Lock()
		l := m[benchKeys[i]]
		mu.Unlock()
		if !l.Allow() {
			b.Fatal("denied")
		}
	}
}
