package setup_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/internal/faultproxy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
)

// TestFromEnvWarmsTheStoreUp (issue "when the store fails, fail fast",
// item 3: a cold start's first store call paid the connection's set-up
// within the 100 ms budget, and a fail-closed policy answered 503): FromEnv
// opens the store's connection with one read while it starts, so that the
// first request's call goes over that connection. The proxy in front of
// dynalite makes its first connection 300 ms slow, three default budgets.
// (The policies get a budget a loaded machine cannot miss, and the
// connection the request uses is counted, not timed. Only the request's
// first store call is checked: net/http may drop a connection whose
// request write it has not seen finish 50 ms after the answer, which a
// loaded machine can make the second call's lot.)
func TestFromEnvWarmsTheStoreUp(t *testing.T) {
	s := ddbtest.Servers(t)[0]
	_, table, _ := ddbtest.Table(t, s)
	for _, tc := range []struct {
		warm     string
		connects int64 // connections once FromEnv returned
		reuse    bool  // the first request goes over the warmed connection
	}{
		// The default budget (1s) is met on a quiet machine, not always
		// on a loaded one: only the connection is checked.
		{"", 1, false}, {"10s", 1, true}, {"off", 0, false},
	} {
		t.Run("warm="+tc.warm, func(t *testing.T) {
			p, err := faultproxy.New(s.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			p.DelayFirstConnection(300 * time.Millisecond)
			var mu sync.Mutex
			var seen []faultproxy.Seen
			p.Inspect(func(s faultproxy.Seen) { mu.Lock(); seen = append(seen, s); mu.Unlock() })
			var stderr bytes.Buffer
			vars := map[string]string{setup.EnvTable: table, setup.EnvEndpoint: p.URL(), setup.EnvStoreWarmUp: tc.warm,
				setup.EnvLogLevel: "debug", setup.EnvOverrides: "daily.store_timeout=10s,burst.store_timeout=10s"}
			e, err := setup.FromEnv(context.Background(), setup.EnvConfig{
				Backends: []setup.Backend{durable.Backend(dynamodb.Config{})}, Policies: []byte(durableFile),
				PolicyFile: "test.yaml", Getenv: env(vars), Stdout: &bytes.Buffer{}, Stderr: &stderr,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Connections(); got != tc.connects {
				t.Fatalf("%d connections once FromEnv returned, want %d\n%s", got, tc.connects, stderr.String())
			}
			if !tc.reuse {
				return
			}
			if !strings.Contains(stderr.String(), `"message":"edgelimit: store warmed up","store":"dynamodb:`+table+`"`) {
				t.Errorf("no warm-up log line:\n%s", stderr.String())
			}
			v := e.Engine.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/paid/x", SourceIP: "192.0.2.1",
				Header: headers{"X-Api-Key": "k"}})
			mu.Lock()
			defer mu.Unlock()
			if v.Status != 0 || len(seen) < 2 || seen[1].Fresh {
				t.Errorf("first request: status %d, its first store call on a new connection: %v (%d calls, %d connections); want 0 over the warmed one",
					v.Status, len(seen) < 2 || seen[1].Fresh, len(seen), p.Connections())
			}
		})
	}
}

type headers map[string]string

func (h headers) Get(k string) string { return h[k] }

// TestWarmUpBudget: EDGELIMIT_STORE_WARMUP is a duration of at most 10s or
// off.
func TestWarmUpBudget(t *testing.T) {
	for _, bad := range []string{"soon", "11s", "5"} {
		_, _, _, err := fromEnv(t, map[string]string{setup.EnvStoreWarmUp: bad}, durableFile)
		if err == nil || !strings.Contains(err.Error(), "EDGELIMIT_STORE_WARMUP") {
			t.Errorf("%q: %v, want an error naming EDGELIMIT_STORE_WARMUP", bad, err)
		}
	}
}
