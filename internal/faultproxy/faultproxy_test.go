package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	hctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, _, err := post(hctx, p.URL()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hang: %v, want the client's deadline", err)
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

// TestDelayFirstConnection: the first connection waits, the next does not.
func TestDelayFirstConnection(t *testing.T) {
	p := start(t, func(w http.ResponseWriter, r *http.Request) {})
	p.DelayFirstConnection(200 * time.Millisecond)
	var mu sync.Mutex
	var fresh []bool
	p.Inspect(func(s faultproxy.Seen) { mu.Lock(); fresh = append(fresh, s.Fresh); mu.Unlock() })
	client := func() *http.Client { return &http.Client{Transport: &http.Transport{}} }
	t0 := time.Now()
	c1 := client()
	if resp, err := c1.Post(p.URL(), "text/plain", nil); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	if took := time.Since(t0); took < 200*time.Millisecond {
		t.Errorf("first connection answered in %s, want the 200ms delay", took)
	}
	// The same connection again, and a second one: no delay (neither can
	// be shown to be faster by a clock on a loaded machine, so the count
	// of connections says it).
	if resp, err := c1.Post(p.URL(), "text/plain", nil); err == nil {
		resp.Body.Close()
	}
	if resp, err := client().Post(p.URL(), "text/plain", nil); err == nil {
		resp.Body.Close()
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
