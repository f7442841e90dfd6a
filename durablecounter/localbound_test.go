package durablecounter_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/internal/faultproxy"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// TestLocalModeKeepsTheLimit (issue "when the store fails, fail fast",
// item 2: while store calls failed now and then, a flooded key was
// admitted 70–86 times against the 66 its policy allows over the run,
// because the in-process twin started full each time the instance fell
// back): a gcra policy with on_store_error: local, its store failing every
// other second for 12 s under a flood of one key from 64 goroutines, admits at
// most what docs/store-failure.md bounds one instance by: burst + rate ×
// the run, plus for each fall-back what the store's last answer had left
// and what the bucket refills from that answer to the twin's last
// decision, rounded up to a whole request.
// The clock is the engine's, stepped by the test; the store is dynalite
// behind a proxy that fails every call at once in the odd seconds.
func TestLocalModeKeepsTheLimit(t *testing.T) {
	s := ddbtest.Servers(t)[0]
	_, table, _ := ddbtest.Table(t, s)
	proxy, err := faultproxy.New(s.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	client, _ := ddbtest.Client(t, ddbtest.Server{Name: s.Name, Endpoint: proxy.URL()})
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	const (
		rate  = 10 // per second
		burst = 20
		run   = 12 * time.Second
		step  = 100 * time.Millisecond
		flood = 64
	)
	file, err := policy.Parse("local.yaml", []byte(`version: 1
policies:
  - {name: search, routes: ["GET /search"], key: ip, strategy: durable, algorithm: gcra, limit: 10, window: 1s, burst: 20,
     on_store_error: local, store_timeout: 10s}
`))
	if err != nil {
		t.Fatal(err)
	}
	clock := limitertest.NewClock(time.Unix(1_700_000_000, 0))
	e, err := edgelimit.New(edgelimit.Config{
		Policies: file, HashSecret: []byte(strings.Repeat("s", 32)), Now: clock.Now,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limiters: func(p *policy.Policy) (edgelimit.Limiter, error) {
			return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var admitted, local, byStore atomic.Int64
	// left is what the store's decisions of a step had left; degraded,
	// whether the twin decided any request of it.
	var left atomic.Int64
	var degraded atomic.Bool
	var failing time.Duration
	// excess is what the fall-backs may add (see the doc comment). A
	// fall-back is the twin's decisions from one failing second on, until
	// the next one (the breaker may keep deciding locally past the second's
	// end); prevLeft is what the store had left in the last step before the
	// fall-back's first local decision.
	var excess, prevLeft, lastSeenLeft int64
	var episodes int
	// answeredAt is the last step in which the store answered a call.
	episode, first, last, answeredAt := -1, time.Duration(0), time.Duration(0), time.Duration(0)
	closeEpisode := func() {
		if episode >= 0 {
			excess += prevLeft + int64(rate*(last-first).Seconds()) + 1
			episodes++
			episode = -1
		}
	}
	for at := time.Duration(0); at < run; at += step {
		if at%(2*time.Second) < time.Second {
			proxy.Set(faultproxy.Pass)
		} else {
			proxy.Fail(400, faultproxy.DynamoDBAccessDenied)
			failing += step
		}
		left.Store(0)
		degraded.Store(false)
		forwarded := proxy.Forwarded()
		var wg sync.WaitGroup
		for range flood {
			wg.Go(func() {
				v := e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/search", SourceIP: "198.51.100.7"})
				if v.Status != 0 && v.Status != 429 {
					t.Errorf("status %d, want 200 or 429 (local decisions while the store fails)", v.Status)
				}
				if d := v.Decisions[0]; d.Degraded {
					degraded.Store(true)
				} else {
					for l := left.Load(); d.Remaining > l && !left.CompareAndSwap(l, d.Remaining); l = left.Load() {
					}
				}
				if v.Allowed {
					admitted.Add(1)
					if v.Decisions[0].Degraded {
						local.Add(1)
					} else {
						byStore.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if degraded.Load() {
			if k := int((at - time.Second) / (2 * time.Second)); k != episode {
				closeEpisode()
				episode, first, prevLeft = k, answeredAt, lastSeenLeft
			}
			last = at
		}
		if proxy.Forwarded() > forwarded && at%(2*time.Second) < time.Second {
			answeredAt, lastSeenLeft = at, left.Load()
		}
		clock.Advance(step)
	}
	closeEpisode()
	// The whole run is [0, run): the last step's requests are at run-step.
	bound := int64(burst+rate*(run-step).Seconds()) + excess
	t.Logf("admitted %d (%d by the store, %d locally) of %d requests; bound %d (%d for %d fall-backs, the store failing %s); %d store calls",
		admitted.Load(), byStore.Load(), local.Load(), int(run/step)*flood, bound, excess, episodes, failing, proxy.Requests())
	if admitted.Load() > bound {
		t.Errorf("admitted %d, more than the bound %d", admitted.Load(), bound)
	}
	if local.Load() == 0 || byStore.Load() == 0 {
		t.Errorf("admitted %d by the store and %d locally: the run should have both", byStore.Load(), local.Load())
	}
}
