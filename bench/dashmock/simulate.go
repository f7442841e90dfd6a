package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/dynamodb/inflight"
	"github.com/edgelimit/edgelimit/setup/dynamodb/kv"
	"github.com/edgelimit/edgelimit/setup/signed"
	"github.com/edgelimit/edgelimit/signedwindow"
)

// scenario is the simulated hour: quiet traffic on every route, with the
// incidents an operator would look for on the dashboard.
type scenario struct {
	start   time.Time
	minutes int
	// outage is the span of minutes [from, to) in which DynamoDB is
	// unreachable (the proxy in front of dynalite refuses connections).
	outageFrom, outageTo int
}

func (s scenario) String() string {
	return fmt.Sprintf("%d simulated minutes from %s; DynamoDB unreachable %s–%s", s.minutes, s.start.Format("15:04"),
		s.at(s.outageFrom, 0).Format("15:04"), s.at(s.outageTo, 0).Format("15:04"))
}

func (s scenario) at(minute int, d time.Duration) time.Time {
	return s.start.Add(time.Duration(minute)*time.Minute + d)
}

// simClock is the simulation's clock: it runs at the speed of real time
// (so that the engine measures real store latencies) and jumps forward to
// each request's scheduled instant.
type simClock struct {
	mu    sync.Mutex
	base  time.Time // simulated instant at realStart
	real0 time.Time
}

func newSimClock(start time.Time) *simClock { return &simClock{base: start, real0: time.Now()} }

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(time.Since(c.real0))
}

// advance moves the clock forward to t (never back).
func (c *simClock) advance(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.base.Add(time.Since(c.real0)); t.After(now) {
		c.base = c.base.Add(t.Sub(now))
	}
}

// switchProxy forwards TCP connections to a server until it is switched
// down: then it closes every connection and refuses new ones, as an
// unreachable DynamoDB endpoint does.
type switchProxy struct {
	ln     net.Listener
	target string
	down   atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func newSwitchProxy(target string) (*switchProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &switchProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

func (p *switchProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *switchProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			c.Close()
			continue
		}
		go p.forward(c)
	}
}

func (p *switchProxy) forward(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
	c.Close()
	u.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// setDown switches the proxy down (closing what is open) or up.
func (p *switchProxy) setDown(down bool) {
	p.down.Store(down)
	if down {
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	}
}

func (p *switchProxy) Close() { p.ln.Close(); p.setDown(true) }

// function is one example function as Lambda runs it: setup.FromEnv, the
// real handler, middleware.HTTPAPI.
type function struct {
	handlers.Function
	handle middleware.HTTPAPIHandler
}

// request is one scheduled invocation.
type request struct {
	at     time.Time
	fn     string
	method string
	path   string
	query  string
	ip     string
	header map[string]string
	body   string
	// tts: the client keeps its token and solves challenges.
	ttsClient *ttsClient
}

// ttsClient is a cooperating client of the signed route: it sends back its
// newest token and solves a challenge when it has none.
type ttsClient struct{ token string }

// simulate runs the scenario against the four example functions, in
// process, with their state in dynalite behind a proxy that the outage
// switches off, and returns the EMF lines they wrote.
func simulate(ctx context.Context, dynalite string, sc scenario) ([]byte, error) {
	u := strings.TrimPrefix(strings.TrimPrefix(dynalite, "http://"), "https://")
	proxy, err := newSwitchProxy(u)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	client, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: dynalite})
	if err != nil {
		return nil, err
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	table := "edgelimit-dashmock-" + base64.RawURLEncoding.EncodeToString(suffix[:])
	if err := ddb.CreateTable(ctx, client, table); err != nil {
		return nil, fmt.Errorf("create table on dynalite: %w", err)
	}

	hashKey := make([]byte, 32)
	_, _ = rand.Read(hashKey)
	env := map[string]string{
		setup.EnvTable:      table,
		setup.EnvEndpoint:   proxy.URL(),
		setup.EnvHashKey:    base64.StdEncoding.EncodeToString(hashKey),
		setup.EnvSecrets:    signedwindow.NewKey(),
		setup.EnvLogLevel:   "error",
		"AWS_REGION":        "us-east-1",
		"AWS_ACCESS_KEY_ID": "dashmock", "AWS_SECRET_ACCESS_KEY": "dashmock",
	}
	clock := newSimClock(sc.start)
	lines := &lockedBuffer{}
	fns := map[string]*function{}
	for _, f := range handlers.All() {
		e, err := setup.FromEnv(ctx, setup.EnvConfig{
			Policies: f.Policies(), PolicyFile: f.PolicyFile, Function: f.Name,
			Getenv: func(k string) string { return env[k] }, Stdout: lines, Stderr: io.Discard, Now: clock.Now,
			// Each function's backends, as its main package passes them.
			Backends: []setup.Backend{durable.Backend(dynamodb.Config{}), kv.Backend(dynamodb.Config{}),
				inflight.Backend(dynamodb.Config{}), signed.Backend()},
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		fns[f.Name] = &function{Function: f, handle: middleware.HTTPAPI(e.Engine, f.New(handlers.Deps{Logger: e.Logger}))}
	}

	reqs := schedule(sc)
	down := false
	for i, r := range reqs {
		clock.advance(r.at)
		if minute := int(r.at.Sub(sc.start) / time.Minute); (minute >= sc.outageFrom && minute < sc.outageTo) != down {
			down = !down
			proxy.setDown(down)
		}
		f := fns[r.fn]
		if r.ttsClient != nil {
			if err := r.ttsClient.call(ctx, f, r, i); err != nil {
				return nil, err
			}
			continue
		}
		if _, err := f.handle(ctx, event(r, f, i, r.header)); err != nil {
			return nil, fmt.Errorf("%s %s: %w", r.method, r.path, err)
		}
	}
	return lines.Bytes(), nil
}

// call sends r with the client's token; on a challenge it solves it and
// retries with the proof, as client.Transport does.
func (c *ttsClient) call(ctx context.Context, f *function, r request, i int) error {
	h := map[string]string{"content-type": "application/json"}
	if c.token != "" {
		h["edgelimit-token"] = c.token
	}
	for attempt := 0; attempt < 2; attempt++ {
		resp, err := f.handle(ctx, event(r, f, i, h))
		if err != nil {
			return err
		}
		if t := respHeader(resp, signedwindow.HeaderToken); t != "" {
			c.token = t
		}
		ch := respHeader(resp, signedwindow.HeaderChallenge)
		if resp.StatusCode != http.StatusTooManyRequests || ch == "" {
			return nil
		}
		proof, err := pow.Solve(ctx, ch)
		if err != nil {
			return err
		}
		delete(h, "edgelimit-token")
		h["edgelimit-proof"] = proof
	}
	return nil
}

func respHeader(resp events.APIGatewayV2HTTPResponse, name string) string {
	for k, v := range resp.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// event is the API Gateway HTTP API (payload 2.0) event of r.
func event(r request, f *function, i int, h map[string]string) events.APIGatewayV2HTTPRequest {
	headers := map[string]string{"x-forwarded-for": r.ip, "user-agent": "dashmock"}
	for k, v := range h {
		headers[k] = v
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: f.Routes[0], RawPath: r.path, RawQueryString: r.query, Headers: headers, Body: r.body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: f.Routes[0], RequestID: "dashmock-" + strconv.Itoa(i), Stage: "$default",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: r.method, Path: r.path, Protocol: "HTTP/1.1", SourceIP: r.ip},
		},
	}
	if r.query != "" {
		ev.QueryStringParameters = map[string]string{}
		for _, kv := range strings.Split(r.query, "&") {
			k, v, _ := strings.Cut(kv, "=")
			ev.QueryStringParameters[k] = v
		}
	}
	return ev
}

// schedule lays out the hour's requests, in time order. Per minute:
//   - paid: three API keys, 8 requests each; minutes 18–21 a scraper's key
//     sends 60 requests in one second (burst 20, 10/s: most denied).
//   - contact: six addresses, one message each; minutes 30–35 one address
//     sends 25 (5 a minute allowed).
//   - search: twenty addresses, two searches each; minutes 8–11 one
//     address floods 150 searches in five seconds (burst 20, 10/s).
//   - tts: a cooperating client (token, proofs) four times a minute, and a
//     bot that sends no proof six times.
func schedule(sc scenario) []request {
	rng := mrand.New(mrand.NewPCG(1, 2))
	var reqs []request
	spread := func(minute, n int, span time.Duration, mk func(k int) request) {
		for k := 0; k < n; k++ {
			r := mk(k)
			r.at = sc.at(minute, time.Duration(rng.Int64N(int64(span))))
			reqs = append(reqs, r)
		}
	}
	tts := &ttsClient{}
	for m := 0; m < sc.minutes; m++ {
		for key := 0; key < 3; key++ {
			spread(m, 8, time.Minute, func(int) request {
				return request{fn: "paid", method: "GET", path: "/paid/report", ip: "198.51.100.10",
					header: map[string]string{"x-api-key": fmt.Sprintf("customer-%d", key)}}
			})
		}
		if m >= 18 && m < 22 {
			spread(m, 60, time.Second, func(int) request {
				return request{fn: "paid", method: "GET", path: "/paid/export", ip: "203.0.113.66", header: map[string]string{"x-api-key": "scraper"}}
			})
		}
		spread(m, 6, time.Minute, func(k int) request {
			return contactReq(fmt.Sprintf("192.0.2.%d", 10+rng.IntN(200)))
		})
		if m >= 30 && m < 36 {
			spread(m, 25, 50*time.Second, func(int) request { return contactReq("203.0.113.99") })
		}
		spread(m, 40, time.Minute, func(k int) request {
			return request{fn: "search", method: "GET", path: "/search", query: "q=walnut", ip: fmt.Sprintf("198.51.100.%d", 20+k/2)}
		})
		if m >= 8 && m < 12 {
			spread(m, 150, 5*time.Second, func(int) request {
				return request{fn: "search", method: "GET", path: "/search", query: "q=oak", ip: "203.0.113.7"}
			})
		}
		spread(m, 4, time.Minute, func(int) request {
			return request{fn: "tts", method: "POST", path: "/tts", ip: "192.0.2.200", body: `{"text":"hello"}`, ttsClient: tts}
		})
		spread(m, 6, time.Minute, func(int) request {
			return request{fn: "tts", method: "POST", path: "/tts", ip: "203.0.113.50", body: `{"text":"spam"}`,
				header: map[string]string{"content-type": "application/json"}}
		})
	}
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].at.Before(reqs[j].at) })
	return reqs
}

func contactReq(ip string) request {
	return request{fn: "contact", method: "POST", path: "/contact", ip: ip,
		header: map[string]string{"content-type": "application/json"}, body: `{"name":"A","email":"a@example.com","message":"hello"}`}
}

// lockedBuffer collects the functions' EMF lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b...)
}

var errNoDynalite = errors.New("dashmock: EDGELIMIT_DYNALITE_ENDPOINT is not set: run it under internal/tools/testservers (make dashboard-mock does), or pass -emf FILE")
