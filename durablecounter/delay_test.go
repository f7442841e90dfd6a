package durablecounter_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// delayPolicy is a durable gcra policy with max_delay, parsed as a policy
// file gives it.
func delayPolicy(t *testing.T, fields string) *policy.Policy {
	t.Helper()
	f, err := policy.Parse("delay.yaml", []byte("version: 1\npolicies:\n  - name: wait\n    routes: [\"GET /a\"]\n    key: ip\n    strategy: durable\n    algorithm: gcra\n"+fields))
	if err != nil {
		t.Fatal(err)
	}
	return f.Policies[0]
}

// delayStores are the stores a max_delay test runs on: memory, and every
// DynamoDB-API server the machine has.
func delayStores(t *testing.T, f func(t *testing.T, store durablecounter.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, durablecounter.NewMemory(durablecounter.MemoryConfig{})) })
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		f(t, dynamoStore(t, s, dynamostore.TransactionsAuto))
	})
}

// TestGCRAMaxDelaySteps is max_delay's rule at fixed instants, on every
// store: one a second, burst 1 and max_delay 3s is nginx's `rate=1r/s
// burst=3` without nodelay. A burst at one instant admits the first at
// once and the next three for their turns, one second apart, and denies the
// fifth; a request later finds the turns already reserved; a refund of a
// waiting request gives its turn back.
func TestGCRAMaxDelaySteps(t *testing.T) {
	delayStores(t, func(t *testing.T, store durablecounter.Store) {
		c, err := durablecounter.New(durablecounter.Config{Policy: delayPolicy(t, "    limit: 1\n    window: 1s\n    burst: 1\n    max_delay: 3s\n"), Store: store})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		key := "k-" + strings.ReplaceAll(t.Name(), "/", "-")
		at := func(ms int) edgelimit.Request {
			return edgelimit.Request{Key: key, At: limitertest.T0.Add(time.Duration(ms) * time.Millisecond)}
		}
		type step struct {
			ms      int
			allowed bool
			delay   time.Duration // allowed: its turn
			retry   time.Duration // denied: Retry-After
		}
		for i, s := range []step{
			{0, true, 0, 0},
			{0, true, time.Second, 0},
			{0, true, 2 * time.Second, 0},
			{0, true, 3 * time.Second, 0},
			{0, false, 0, 4 * time.Second}, // queue full: a turn without waiting in 4s
			{500, false, 0, 3500 * time.Millisecond},
			{1000, true, 3 * time.Second, 0}, // the turn at 4s, three seconds on
			{1000, false, 0, 4 * time.Second},
			{9000, true, 0, 0}, // idle again: at once
		} {
			d, err := c.Allow(ctx, at(s.ms))
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != s.allowed || d.Allowed && d.Delay != s.delay || !d.Allowed && (d.RetryAfter != s.retry || d.Delay != 0) {
				t.Fatalf("step %d at %dms: allowed %v delay %s retry %s; want allowed %v delay %s retry %s",
					i, s.ms, d.Allowed, d.Delay, d.RetryAfter, s.allowed, s.delay, s.retry)
			}
			if d.Allowed && d.Remaining != 0 && d.Delay > 0 {
				t.Errorf("step %d: a waiting request reports %d remaining, want 0", i, d.Remaining)
			}
		}
		// The last waiting request leaves: its turn comes back.
		if d, err := c.Allow(ctx, at(9000)); err != nil || !d.Allowed || d.Delay != time.Second {
			t.Fatalf("second request at 9s: %+v, %v; want its turn in 1s", d, err)
		}
		d, err := c.Allow(ctx, at(9000))
		if err != nil || !d.Allowed || d.Delay != 2*time.Second {
			t.Fatalf("third request at 9s: %+v, %v; want its turn in 2s", d, err)
		}
		if err := c.Refund(ctx, at(9000), d); err != nil {
			t.Fatal(err)
		}
		if d, err := c.Allow(ctx, at(9000)); err != nil || !d.Allowed || d.Delay != 2*time.Second {
			t.Fatalf("after the refund: %+v, %v; want the refunded turn (2s) again", d, err)
		}
	})
}

// TestGCRAMaxDelayExactUnderConcurrency: 64 clients at one instant on a
// real server admit exactly burst plus max_delay's turns, each turn given
// once, and no more.
func TestGCRAMaxDelayExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		// 10 a second (T = 100ms), burst 2, max_delay 1s: 2 at once and 10
		// turns, 100ms to 1s away.
		c, err := durablecounter.New(durablecounter.Config{
			Policy: delayPolicy(t, "    limit: 10\n    window: 1s\n    burst: 2\n    max_delay: 1s\n    deny_cache: false\n"),
			Store:  dynamoStore(t, s, dynamostore.TransactionsAuto),
		})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var delays []time.Duration
		denied := 0
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				d, err := c.Allow(context.Background(), edgelimit.Request{Key: "hot", At: limitertest.T0})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Error(err)
				case d.Allowed:
					delays = append(delays, d.Delay)
				default:
					denied++
				}
			})
		}
		wg.Wait()
		slices.Sort(delays)
		want := []time.Duration{0, 0}
		for k := 1; k <= 10; k++ {
			want = append(want, time.Duration(k)*100*time.Millisecond)
		}
		if !slices.Equal(delays, want) || denied != 64-len(want) {
			t.Fatalf("admitted with delays %v and denied %d; want %v and %d denied", delays, denied, want, 64-len(want))
		}
	})
}

// TestMaxDelayRefusals: max_delay is refused where a turn cannot be
// reserved, at the field's line, and by New for a policy built in code.
func TestMaxDelayRefusals(t *testing.T) {
	head := "version: 1\npolicies:\n  - name: p\n    routes: [\"GET /a\"]\n    key: ip\n    strategy: durable\n    limit: 4\n    window: 1s\n"
	for _, tt := range []struct{ fields, want string }{
		{"    algorithm: sliding-window\n    max_delay: 1s\n", `p.yaml:10: policy "p": max_delay applies only to algorithm gcra: a sliding-window keeps a count per window`},
		{"    max_delay: 1s\n", `p.yaml:9: policy "p": max_delay applies only to algorithm gcra: a fixed-window keeps a count per window`},
		{"    algorithm: gcra\n    shards: 2\n    max_delay: 1s\n", `p.yaml:11: policy "p": max_delay does not go with shards`},
	} {
		_, err := policy.Parse("p.yaml", []byte(head+tt.fields))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.fields, err, tt.want)
		}
	}
	p := delayPolicy(t, "    limit: 4\n    window: 1s\n    max_delay: 1s\n")
	opts := *p.Options.(*durablecounter.Options)
	opts.Algorithm = durablecounter.SlidingLog
	if _, err := durablecounter.New(durablecounter.Config{Policy: p, Options: &opts}); err == nil || !strings.Contains(err.Error(), "max_delay applies only to algorithm gcra") {
		t.Errorf("New with a sliding log and max_delay: %v, want a refusal", err)
	}
}
