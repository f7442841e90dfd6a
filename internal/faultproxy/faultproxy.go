// Package faultproxy is an HTTP proxy for tests that stands in front of a
// real server (dynalite, moto) and fails as a store does: it passes
// requests on, hangs them (no answer until the client gives up), fails
// them at once with a status the test chooses, delays its first connection
// (as a cold start's DNS, TCP and TLS do), and comes back, while counting
// what reached it.
//
// It never passes a client's abort on: a request it forwards is completed
// with the server even when the client has gone (its time budget ended),
// because dynalite throws on an aborted request and crashes.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what the proxy does with a request.
type Mode uint8

const (
	// Pass forwards requests to the server.
	Pass Mode = iota
	// Hang holds requests without an answer until their client gives up
	// (or the proxy closes); they never reach the server.
	Hang
	// Fail answers every request at once with the status and body Fail set.
	Fail
)

// DynamoDBUnavailable is a body for Fail(503, ...) as DynamoDB answers an
// overloaded request. The AWS SDK retries it within the call's budget.
const DynamoDBUnavailable = `{"__type":"com.amazonaws.dynamodb.v20120810#ServiceUnavailable","message":"faultproxy: the store is failing"}`

// DynamoDBAccessDenied is a body for Fail(400, ...) that the AWS SDK does
// not retry: the call fails at once.
const DynamoDBAccessDenied = `{"__type":"com.amazon.coral.service#AccessDeniedException","message":"faultproxy: the store is failing"}`

// Proxy is a fault-injecting HTTP proxy on 127.0.0.1. It is safe for
// concurrent use.
type Proxy struct {
	target *url.URL
	ln     net.Listener
	srv    *http.Server
	client *http.Client

	mu     sync.Mutex
	mode   Mode
	status int
	body   []byte
	// slowConns connections to come wait slowDelay (-1: all of them).
	slowConns int
	slowDelay time.Duration
	release   chan struct{} // closed when the proxy closes
	inspect   func(Seen)

	requests, forwarded, conns, fresh, inflight atomic.Int64
	seen                                        chan struct{} // closed at the first connection
	seenOnce                                    sync.Once
}

// New starts a proxy in front of target (http://host:port), passing
// requests on.
func New(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, errors.New("faultproxy: target must be http://host:port")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: u, release: make(chan struct{}), seen: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}}
	p.ln = &listener{Listener: ln, p: p}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: time.Minute,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, new(atomic.Int64))
		}}
	go func() { _ = p.srv.Serve(p.ln) }()
	return p, nil
}

// URL is the proxy's address, to give a client as its endpoint.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Set switches every request from now on to m. A request already hanging
// keeps hanging until its client gives up.
func (p *Proxy) Set(m Mode) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
}

// Fail switches to Fail: every request is answered status and body.
func (p *Proxy) Fail(status int, body string) {
	p.mu.Lock()
	p.mode, p.status, p.body = Fail, status, []byte(body)
	p.mu.Unlock()
}

// DelayFirstConnection makes the first connection the proxy accepts wait d
// before its first request is read, as a cold start's connection set-up
// does; later connections are served at once. Call it before the first
// connection.
func (p *Proxy) DelayFirstConnection(d time.Duration) { p.DelayConnections(1, d) }

// DelayConnections makes the next n connections the proxy accepts (every
// one, for n < 0) wait d before their first request is read: each new
// connection of a client is slow to set up, the ones it keeps open are
// not.
func (p *Proxy) DelayConnections(n int, d time.Duration) {
	p.mu.Lock()
	p.slowConns, p.slowDelay = n, d
	p.mu.Unlock()
}

// Seen is one request as the proxy saw it, for Inspect.
type Seen struct {
	// At is when it arrived; Mode what the proxy did with it.
	At   time.Time
	Mode Mode
	// Fresh: it came first on its connection (one the client had just
	// opened), as FreshRequests counts.
	Fresh bool
	// Body is the request's body.
	Body []byte
	// Status is the server's answer to a forwarded request (0: none), or
	// the failure's status.
	Status int
	// Took is how long the proxy took to answer (or the client to give
	// up): for a forwarded request, the server's time.
	Took time.Duration
}

// Inspect has f called once for every request, when the proxy is done with
// it (a hanging one once its client gave up), from the request's
// goroutine. Call it before the first request.
func (p *Proxy) Inspect(f func(Seen)) {
	p.mu.Lock()
	p.inspect = f
	p.mu.Unlock()
}

// FirstConnection is closed once the proxy has accepted a connection.
func (p *Proxy) FirstConnection() <-chan struct{} { return p.seen }

// Requests is how many requests reached the proxy, in any mode.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Forwarded is how many requests the proxy passed on to the server.
func (p *Proxy) Forwarded() int64 { return p.forwarded.Load() }

// FreshRequests is how many requests came first on their connection: the
// requests that paid for a connection's set-up (and, with
// DelayConnections, for its delay).
func (p *Proxy) FreshRequests() int64 { return p.fresh.Load() }

// connKey finds a connection's request count in a request's context.
type connKey struct{}

// InFlight is how many forwarded requests the server has not answered yet
// (their clients may have given up: the proxy still waits for the server).
func (p *Proxy) InFlight() int64 { return p.inflight.Load() }

// Connections is how many connections the proxy accepted.
func (p *Proxy) Connections() int64 { return p.conns.Load() }

// Close stops the proxy and ends the requests hanging in it.
func (p *Proxy) Close() {
	p.mu.Lock()
	select {
	case <-p.release:
	default:
		close(p.release)
	}
	p.mu.Unlock()
	_ = p.srv.Close()
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	fresh := false
	if n, ok := r.Context().Value(connKey{}).(*atomic.Int64); ok && n.Add(1) == 1 {
		p.fresh.Add(1)
		fresh = true
	}
	at := time.Now()
	p.mu.Lock()
	mode, status, body, inspect := p.mode, p.status, p.body, p.inspect
	p.mu.Unlock()
	seen := Seen{At: at, Mode: mode, Fresh: fresh}
	if inspect != nil {
		defer func() { seen.Took = time.Since(at); inspect(seen) }()
	}
	switch mode {
	case Hang:
		// Read first: only then does the server notice a client that gives
		// up (and end r's context).
		seen.Body, _ = io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
		case <-p.release:
		}
		return
	case Fail:
		seen.Status = status
		if inspect != nil {
			seen.Body, _ = io.ReadAll(r.Body)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		// As DynamoDB does: the SDK checks it.
		w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}
	seen.Body, seen.Status = p.forward(w, r)
}

// forward passes r on and copies the answer back, and returns r's body and
// the server's status. The upstream request does not end with the
// client's: the server always sees it through.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) (body []byte, status int) {
	in, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, 0 // the client went away before it finished sending
	}
	u := *p.target
	u.Path, u.RawQuery = r.URL.Path, r.URL.RawQuery
	out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, u.String(), bytes.NewReader(in))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return in, 0
	}
	out.Header = r.Header.Clone()
	p.forwarded.Add(1)
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	resp, err := p.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return in, 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return in, 0
	}
	for k, vs := range resp.Header {
		if k == "Content-Length" {
			continue
		}
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
	return in, resp.StatusCode
}

// listener counts connections and delays the first.
type listener struct {
	net.Listener
	p *Proxy
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	p := l.p
	p.conns.Add(1)
	p.seenOnce.Do(func() { close(p.seen) })
	p.mu.Lock()
	delay := time.Duration(0)
	if p.slowConns != 0 {
		delay = p.slowDelay
		if p.slowConns > 0 {
			p.slowConns--
		}
	}
	p.mu.Unlock()
	if delay > 0 {
		return &slowConn{Conn: c, delay: delay, release: p.release}, nil
	}
	return c, nil
}

// slowConn waits before its first read.
type slowConn struct {
	net.Conn
	delay   time.Duration
	release <-chan struct{}
	once    sync.Once
}

func (c *slowConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		t := time.NewTimer(c.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.release:
		}
	})
	return c.Conn.Read(b)
}
