package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/internal/faultproxy"
)

func start(t *testing.T, h http.HandlerFunc) *faultproxy.Proxy {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	p, err := faultproxy.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func post(ctx context.Context, url string) (int, string, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/x?y=1", strings.NewReader("body"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestModes(t *testing.T) {
	p := start(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.URL.Path+"?"+r.URL.RawQuery)
		w.WriteHeader(201)
		_, _ = w.Write(append([]byte("echo "), b...))
	})
	var mu sync.Mutex
	var seen []string
	p.Inspect(func(s faultproxy.Seen) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%d:%s:%d", s.Mode, s.Body, s.Status))
		mu.Unlock()
	})
	ctx := context.Background()
	if code, body, err := post(ctx, p.URL()); err != nil || code != 201 || body != "echo body" {
		t.Fatalf("pass: %d %q %v", code, body, err)
	}
	p.Fail(400, faultproxy.DynamoDBAccessDenied)
	if code, body, err := post(ctx, p.URL()); err != nil || code != 400 || body != faultproxy.DynamoDBAccessDenied {
		t.Fatalf("fail: %d %q %v", code, body, err)
	}
	p.Set(faultproxy.Hang)
	// The client gives up once the proxy holds its request (not after a
	// fixed time: on a loaded machine a 50 ms budget ran out before the
	// request reached the proxy, which then never saw it).
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for p.Requests() < 3 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, _, err := post(hctx, p.URL()); !errors.Is(err, context.Canceled) {
		t.Fatalf("hang: %v, want the client's giving up", err)
	}
	p.Set(faultproxy.Pass)
	if code, _, err := post(ctx, p.URL()); err != nil || code != 201 {
		t.Fatalf("back: %d %v", code, err)
	}
	if p.Requests() != 4 || p.Forwarded() != 2 {
		t.Errorf("requests %d, forwarded %d; want 4 and 2", p.Requests(), p.Forwarded())
	}
	// The hanging request's end is seen once the server notices its client
	// gave up: wait for it.
	for deadline := time.Now().Add(time.Minute); ; {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	slices.Sort(seen)
	got := strings.Join(seen, " ")
	mu.Unlock()
	if want := "0:body:201 0:body:201 1:body:0 2:body:400"; got != want {
		t.Errorf("inspected %s, want %s", got, want)
	}
}

// TestForwardedRequestsOutliveTheirClient: a client that gives up does not
// abort the request at the server.
func TestForwardedRequestsOutliveTheirClient(t *testing.T) {
	release, done := make(chan struct{}), make(chan error, 1)
	p := start(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		done <- r.Context().Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for p.Forwarded() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, _, err := post(ctx, p.URL()); !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("the server saw its request end: %v", err)
	}
}

// rawPost sends a POST on conn, a connection the test holds itself (so
// that a second request on it is sure to reuse it: net/http's client may
// open a new one when a loaded machine delays its bookkeeping), and
// returns the answer's status.
func rawPost(conn net.Conn) (int, error) {
	if _, err := io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: proxy\r\nContent-Length: 0\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// TestDelayFirstConnection: the first connection waits, the next does not.
func TestDelayFirstConnection(t *testing.T) {
	p := start(t, func(w http.ResponseWriter, r *http.Request) {})
	p.DelayFirstConnection(200 * time.Millisecond)
	var mu sync.Mutex
	var fresh []bool
	p.Inspect(func(s faultproxy.Seen) { mu.Lock(); fresh = append(fresh, s.Fresh); mu.Unlock() })
	addr := strings.TrimPrefix(p.URL(), "http://")
	t0 := time.Now()
	c1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if code, err := rawPost(c1); err != nil || code != 200 {
		t.Fatalf("first request: %d %v", code, err)
	}
	// A lower bound: a loaded machine only makes it longer.
	if took := time.Since(t0); took < 200*time.Millisecond {
		t.Errorf("first connection answered in %s, want the 200ms delay", took)
	}
	// The same connection again, and a second one (neither can be shown
	// to be faster by a clock on a loaded machine, so the counts say it;
	// TestDelayOnlyTheFirstConnection shows the second is not delayed).
	if code, err := rawPost(c1); err != nil || code != 200 {
		t.Fatalf("second request on the first connection: %d %v", code, err)
	}
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if code, err := rawPost(c2); err != nil || code != 200 {
		t.Fatalf("request on a second connection: %d %v", code, err)
	}
	select {
	case <-p.FirstConnection():
	default:
		t.Error("FirstConnection not closed")
	}
	if p.Connections() != 2 || p.FreshRequests() != 2 || p.Requests() != 3 {
		t.Errorf("%d connections, %d of %d requests first on theirs; want 2, 2 of 3", p.Connections(), p.FreshRequests(), p.Requests())
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []bool{true, false, true}; !slices.Equal(fresh, want) {
		t.Errorf("Seen.Fresh of the three requests: %v, want %v", fresh, want)
	}
}

// TestDelayOnlyTheFirstConnection: while the first connection waits (an
// hour: longer than the test), a second one is answered. No clock decides
// it: a delayed second connection would hang until the minute's budget.
func TestDelayOnlyTheFirstConnection(t *testing.T) {
	p := start(t, func(w http.ResponseWriter, r *http.Request) {})
	p.DelayFirstConnection(time.Hour)
	addr := strings.TrimPrefix(p.URL(), "http://")
	c1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	first := make(chan error, 1)
	go func() { _, err := rawPost(c1); first <- err }()
	<-p.FirstConnection() // c1 is the connection the proxy delays
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(time.Minute))
	if code, err := rawPost(c2); err != nil || code != 200 {
		t.Fatalf("second connection while the first waits: %d %v, want 200 at once", code, err)
	}
	select {
	case err := <-first:
		t.Fatalf("the first connection was answered (%v) before its hour", err)
	default:
	}
	p.Close() // ends the first connection's wait
	<-first
}
