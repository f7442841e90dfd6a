package durablecounter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// Regression (issue #10, "gcra denies nothing that fits, under concurrency
// too"): two Counters on one memory store, clocks 1 ms apart, a fresh gcra
// key with limit 2 and burst 2. The request of the later clock was allowed
// with Remaining 1; the earlier one was then denied with Remaining 0
// although a token was left: the idle update stamped the item with its
// writer's time, and the request stamped a moment earlier failed the
// condition by that gap. A request whose clock is a little behind the
// item's last writer is now decided as if at the later instant. The same
// shape is checked for every algorithm.
func TestTwoClocksOneMillisecondApart(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg, func(t *testing.T) {
			store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
			start := limitertest.WindowStart(limitertest.T0, time.Minute).Add(30 * time.Second)
			early := limitertest.NewClock(start)
			late := limitertest.NewClock(start.Add(time.Millisecond))
			p := &policy.Policy{Name: "two-clocks", Limit: 2, Window: time.Second, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), Burst: 2}}
			mk := func(c *limitertest.Clock) *durablecounter.Counter {
				cnt, err := durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: c.Now})
				if err != nil {
					t.Fatal(err)
				}
				return cnt
			}
			a, b := mk(late), mk(early)
			ctx := context.Background()
			if d, err := a.Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || !d.Allowed || d.Remaining != 1 {
				t.Fatalf("later clock: Allow = %+v, %v; want allowed with Remaining 1", d, err)
			}
			if d, err := b.Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || !d.Allowed || d.Remaining != 0 {
				t.Fatalf("earlier clock (1 ms behind): Allow = %+v, %v; want allowed with Remaining 0 (a token was left)", d, err)
			}
			for _, c := range []*durablecounter.Counter{a, b} {
				if d, err := c.Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || d.Allowed {
					t.Errorf("third request: Allow = %+v, %v; want denied (limit 2)", d, err)
				}
			}
		})
	}
}

// firstRequestBackend is a store per instance: instances of one backend
// share the counts (the same memory store, or the same table), each with
// the views of its own DynamoStore, as separate Lambda instances have.
type firstRequestBackend struct {
	name     string
	store    func(t *testing.T) func() durablecounter.Store
	keys     [2]int // keys of the two shapes
	parallel bool
}

func firstRequestBackends(t *testing.T) []firstRequestBackend {
	t.Helper()
	out := []firstRequestBackend{{name: "memory", keys: [2]int{1000, 200}, store: func(t *testing.T) func() durablecounter.Store {
		s := durablecounter.NewMemory(durablecounter.MemoryConfig{})
		return func() durablecounter.Store { return s }
	}}}
	var servers []ddbtest.Server
	t.Run("servers", func(t *testing.T) { servers = ddbtest.Servers(t) })
	for _, s := range servers {
		// On a server, about half the fresh keys meet the adversarial
		// order (measured with the bug of issue #10 put back, gcra deciding
		// at the request's own instant: 516 of 1,000 and 96 of 200 keys
		// failed on dynalite, 50 of 100 and 6 of 10 on moto): fifty keys
		// of two requests miss such a bug with a probability of about
		// 2^-50, twenty keys of twenty about 2e-6 (on moto, which answers
		// one call at a time, ten keys: 1e-4; and both servers must miss
		// it). The memory store, where the order is rarer (25 of 1,000, 2
		// of 200), keeps the large sizes.
		keys := [2]int{50, 20}
		if s.Name == "moto" {
			keys = [2]int{50, 10}
		}
		out = append(out, firstRequestBackend{name: s.Name, keys: keys, parallel: true, store: func(t *testing.T) func() durablecounter.Store {
			client, table, _ := ddbtest.Table(t, s)
			return func() durablecounter.Store {
				st, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
		}})
	}
	return out
}

// Regression (issue #10): concurrent first requests on fresh keys were
// spuriously denied by gcra — two requests reaching an idle key (limit 2,
// burst 2) at once admitted only one on 23–32 of 1,000 keys on dynalite,
// and 20 requests (10/s, burst 20) admitted 19 on 2 of 200 keys. Here 64
// instances (their own Counter, clock and views) whose clocks are 1 µs
// apart and fixed send every key's requests at once, so that on many keys
// a request with an earlier clock reaches the item after one with a later
// clock (about half of them on a server, see firstRequestBackends). Every request fits (at most the limit, or the burst, per fresh
// key): none may be denied, for any algorithm, on any store. No timing
// enters the assertion: whatever the interleaving, the requests fit.
func TestNoSpuriousDenialOfFirstRequests(t *testing.T) {
	t.Parallel()
	for _, b := range firstRequestBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			if b.parallel {
				t.Parallel()
			}
			for _, alg := range allAlgorithms {
				t.Run(alg, func(t *testing.T) {
					shapes := []struct {
						name          string
						limit, burst  int64
						window        time.Duration
						perKey, keys  int
						windowedLimit int64
					}{
						{name: "limit 2, burst 2, 2 a key", limit: 2, burst: 2, window: time.Second, perKey: 2, keys: b.keys[0], windowedLimit: 2},
						{name: "10/s, burst 20, 20 a key", limit: 10, burst: 20, window: time.Second, perKey: 20, keys: b.keys[1], windowedLimit: 20},
					}
					for _, sh := range shapes {
						t.Run(sh.name, func(t *testing.T) {
							p := &policy.Policy{Name: "first", Limit: sh.limit, Window: sh.window, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), Burst: sh.burst}}
							if alg != string(durablecounter.GCRA) {
								p.Limit, opts(p).Burst = sh.windowedLimit, 0
							}
							newStore := b.store(t)
							start := limitertest.WindowStart(limitertest.T0, time.Minute).Add(20 * time.Second)
							instances := make([]*durablecounter.Counter, limitertest.Workers)
							for w := range instances {
								at := start.Add(-time.Duration(w) * time.Microsecond)
								c, err := durablecounter.New(durablecounter.Config{Policy: p, Store: newStore(), Now: func() time.Time { return at }})
								if err != nil {
									t.Fatal(err)
								}
								instances[w] = c
							}
							admitted := make([]atomic.Int64, sh.keys)
							var next atomic.Int64
							var wg sync.WaitGroup
							errs := make(chan error, len(instances))
							for _, c := range instances {
								wg.Go(func() {
									for {
										i := int(next.Add(1) - 1)
										if i >= sh.keys*sh.perKey {
											return
										}
										k := i / sh.perKey // a key's requests are sent together
										d, err := c.Allow(context.Background(), edgelimit.Request{Key: fmt.Sprintf("key-%04d", k)})
										if err != nil {
											errs <- fmt.Errorf("request %d: %w", i, err)
											return
										}
										if d.Allowed {
											admitted[k].Add(1)
										}
									}
								})
							}
							wg.Wait()
							close(errs)
							for err := range errs {
								t.Fatal(err)
							}
							bad := 0
							for k := range admitted {
								if n := admitted[k].Load(); n != int64(sh.perKey) {
									if bad < 5 {
										t.Errorf("key-%04d: admitted %d of %d requests that all fit", k, n, sh.perKey)
									}
									bad++
								}
							}
							if bad > 0 {
								t.Errorf("%d of %d fresh keys had a spurious denial", bad, sh.keys)
							}
						})
					}
				})
			}
		})
	}
}

// Regression (issue #10, "Compensation never fails silently"): where a
// store has no transactions (dynalite), a batch of durable policies is
// committed one by one and, on a denial, the members already spent are
// refunded. Under 150 concurrent requests a sliding-log policy with 28
// units left then got back only some of them (4–11 were admitted
// afterwards; 1–3 of 18 here), because refund errors were discarded and a
// refund gave up after two failed guards; one request failed with "item
// changed under every attempt". Now every unit comes back: after the
// batches, the first member admits exactly what it had left minus what the
// admitted batches spent, and no batch fails. The sliding log is the
// issue's case; the other algorithms' refunds are checked the same way.
func TestSequentialBatchRefundsEveryUnit(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		t.Parallel()
		algs := allAlgorithms
		if s.Name == "moto" {
			algs = []string{string(durablecounter.SlidingLog), string(durablecounter.GCRA)} // one call at a time
		}
		for _, alg := range algs {
			t.Run(alg, func(t *testing.T) { testSequentialBatchRefunds(t, s, alg) })
		}
	})
}

func testSequentialBatchRefunds(t *testing.T, s ddbtest.Server, alg string) {
	const (
		limit, spentBefore = 50, 22
		quota              = 10
		requests           = 150
	)
	client, table, _ := ddbtest.Table(t, s)
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table, Transactions: dynamostore.TransactionsOff})
	if err != nil {
		t.Fatal(err)
	}
	clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour).Add(time.Minute))
	mk := func(name, alg string, limit int64) *durablecounter.Counter {
		c, err := durablecounter.New(durablecounter.Config{
			Policy: &policy.Policy{Name: name, Limit: limit, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg)}},
			Store:  store, Now: clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := mk("first", alg, limit)
	daily := mk("daily", string(durablecounter.FixedWindow), quota)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The units already spent lie in 22 milliseconds (of a sliding log),
	// as real traffic leaves them.
	for i := range spentBefore {
		if d, err := first.Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || !d.Allowed {
			t.Fatalf("spending unit %d before the batches: %+v, %v", i, d, err)
		}
		clock.Advance(time.Millisecond)
	}
	items := []edgelimit.BatchItem{
		{Limiter: first, Request: edgelimit.Request{Key: "k"}},
		{Limiter: daily, Request: edgelimit.Request{Key: "k"}},
	}
	var admitted, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range requests {
		wg.Go(func() {
			<-gate
			ds, err := first.AllowBatch(ctx, items)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			if ds[0].Allowed && ds[1].Allowed {
				admitted.Add(1)
			}
		})
	}
	close(gate)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d batches failed (first: %v); contention must be retried, not reported", n, requests, firstErr.Load())
	}
	a := admitted.Load()
	if a > quota {
		t.Errorf("admitted %d batches, above daily's limit %d", a, quota)
	}
	left := int64(0)
	for {
		d, err := first.Allow(ctx, edgelimit.Request{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
		left++
	}
	if want := limit - spentBefore - a; left != want {
		t.Errorf("after %d concurrent batches (%d admitted), %s admitted %d more, want exactly %d: every unit a denied batch spent must come back",
			requests, a, alg, left, want)
	}
	if d, err := daily.Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || d.Allowed != (a < quota) {
		t.Errorf("daily after %d admitted batches: %+v, %v", a, d, err)
	}
	t.Logf("%d concurrent batches: %d admitted; then %s admitted the %d it had left", requests, a, alg, left)
}

// Regression (issue #10, "A sharded policy reports the policy, not one
// shard"): with shards: 4 on a global policy of 10, r went
// 1,0,2,1,1,2,1,0,0,0 while 10 requests were admitted, so a client
// honouring r=0 stopped early. r is now a conservative bound of the whole
// policy that reads 0 only when the policy has nothing left: the answering
// shard's remaining, or, when that shard is empty, what the other shards
// have left (one read of them).
func TestShardedRemainingDescribesPolicy(t *testing.T) {
	t.Parallel()
	type backend struct {
		name  string
		store func(t *testing.T) durablecounter.Store
		algs  []string
	}
	backends := []backend{{name: "memory", algs: allAlgorithms, store: func(t *testing.T) durablecounter.Store {
		return durablecounter.NewMemory(durablecounter.MemoryConfig{})
	}}}
	var servers []ddbtest.Server
	t.Run("servers", func(t *testing.T) { servers = ddbtest.Servers(t) })
	for _, s := range servers {
		backends = append(backends, backend{name: s.Name, algs: allAlgorithms, store: func(t *testing.T) durablecounter.Store {
			client, table, _ := ddbtest.Table(t, s)
			st, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}})
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, alg := range b.algs {
				t.Run(alg, func(t *testing.T) {
					clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour).Add(time.Minute))
					c, err := durablecounter.New(durablecounter.Config{
						Policy: &policy.Policy{Name: "global", Limit: 10, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), Shards: 4, DenyCache: true}},
						Store:  b.store(t), Now: clock.Now,
					})
					if err != nil {
						t.Fatal(err)
					}
					var rs []int64
					for k := 1; k <= 10; k++ {
						d, err := c.Allow(context.Background(), edgelimit.Request{Key: "global"})
						if err != nil {
							t.Fatal(err)
						}
						rs = append(rs, d.Remaining)
						if !d.Allowed {
							t.Fatalf("request %d denied (r so far %v); the policy has %d left", k, rs, 10-k+1)
						}
						if d.Limit != 10 {
							t.Errorf("request %d: Limit %d, want the policy's 10", k, d.Limit)
						}
						switch {
						case d.Remaining > int64(10-k):
							t.Errorf("request %d: r=%d, above the policy's %d left", k, d.Remaining, 10-k)
						case d.Remaining == 0 && k < 10:
							t.Errorf("request %d: r=0 although %d requests are still admitted", k, 10-k)
						}
					}
					if rs[9] != 0 {
						t.Errorf("r of the 10th request = %d, want 0 (the policy is spent)", rs[9])
					}
					if d, err := c.Allow(context.Background(), edgelimit.Request{Key: "global"}); err != nil || d.Allowed || d.Remaining != 0 {
						t.Errorf("11th request = %+v, %v; want denied with r=0", d, err)
					}
					t.Logf("r: %v", rs)
				})
			}
		})
	}
}
