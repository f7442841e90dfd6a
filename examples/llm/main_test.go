package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/policy"
)

// engineOn builds the example's engine on store, deciding at one instant.
func engineOn(t *testing.T, store durablecounter.Store) *edgelimit.Engine {
	t.Helper()
	f, err := policy.Parse("policies.yaml", policies)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Policies {
		p.StoreTimeout = 30 * time.Second // a budget a loaded machine cannot miss
	}
	at := time.Unix(1_700_000_000, 0)
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("s", 32)),
		Now: func() time.Time { return at }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
		}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Two token counters settled exactly under 32 concurrent clients of one
// key: every client sends prompts of random lengths and max_tokens until
// its first 429; each counter is then charged exactly the tokens the
// responses reported (its reservations all settled), and never more than
// its quota, since the input tokens are reserved exactly and the output
// never exceeds its reservation. On the memory store and each real server.
func TestTokenCountersUnderConcurrency(t *testing.T) {
	stores := map[string]func(t *testing.T) durablecounter.Store{
		"memory": func(*testing.T) durablecounter.Store { return durablecounter.NewMemory(durablecounter.MemoryConfig{}) },
	}
	if os.Getenv(ddbtest.EnvDynalite) != "" || os.Getenv(ddbtest.EnvMoto) != "" {
		for _, s := range ddbtest.Servers(t) {
			stores[s.Name] = func(t *testing.T) durablecounter.Store {
				client, table, _ := ddbtest.Table(t, s)
				st, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
		}
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := engineOn(t, store(t))
			h := handler(e)
			var in, out, admitted atomic.Int64
			var wg sync.WaitGroup
			for c := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(c), 1))
					for {
						words := 1 + r.IntN(300)
						body, _ := json.Marshal(request{Prompt: strings.Repeat("word ", words), MaxTokens: int64(1 + r.IntN(400))})
						ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "POST /generate", RawPath: "/generate",
							Headers: map[string]string{"x-api-key": "client"}, Body: string(body)}
						ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path, ev.RequestContext.HTTP.SourceIP = "POST", "/generate", "192.0.2.1"
						resp, err := h(context.Background(), ev)
						if err != nil || resp.StatusCode != 200 {
							if resp.StatusCode != 429 {
								t.Errorf("status %d, %v: %s", resp.StatusCode, err, resp.Body)
							}
							return
						}
						var i, o int64
						if _, err := fmt.Sscanf(resp.Headers["X-Tokens"], "%d in, %d out", &i, &o); err != nil {
							t.Errorf("X-Tokens %q: %v", resp.Headers["X-Tokens"], err)
							return
						}
						admitted.Add(1)
						in.Add(i)
						out.Add(o)
					}
				}()
			}
			wg.Wait()
			for _, c := range []struct {
				policy   string
				reported int64
				limit    int64
			}{{"input-tokens", in.Load(), 10000}, {"output-tokens", out.Load(), 2000}} {
				key, err := e.KeyOf(c.policy, "client")
				if err != nil {
					t.Fatal(err)
				}
				d, err := e.Limiter(c.policy).(edgelimit.Peeker).Peek(context.Background(), edgelimit.Request{Key: key, At: time.Unix(1_700_000_000, 0)})
				if err != nil {
					t.Fatal(err)
				}
				charged := c.limit - d.Remaining
				t.Logf("%s: %d requests admitted; %s reported %d, charged %d of %d", name, admitted.Load(), c.policy, c.reported, charged, c.limit)
				if c.reported > c.limit || charged != c.reported {
					t.Errorf("%s: charged %d, reported %d: want equal, at most %d", c.policy, charged, c.reported, c.limit)
				}
			}
		})
	}
}
