package durablecounter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// skewBackend is a store and a way to read an item's stored state.
type skewBackend struct {
	name  string
	store Store
	read  func(t *testing.T, o op) state
	steps int
}

func skewBackends(t *testing.T) []skewBackend {
	t.Helper()
	mem := NewMemory(MemoryConfig{})
	out := []skewBackend{{name: "memory", store: mem, steps: 400, read: func(t *testing.T, o op) state {
		r := mem.ref(&o.id)
		r.sh.mu.Lock()
		defer r.sh.mu.Unlock()
		if e := r.find(); e != nil {
			return o.rule.compact(e.e.st, o.t) // a copy
		}
		return state{}
	}}}
	var servers []ddbtest.Server
	t.Run("servers", func(t *testing.T) { servers = ddbtest.Servers(t) }) // skips only itself
	for _, s := range servers {
		store, reader := newDynamoPair(t, s)
		steps := 150
		if s.Name == "moto" {
			steps = 20 // moto answers one call at a time, in ~10 ms
		}
		out = append(out, skewBackend{name: s.Name, store: store, steps: steps, read: func(t *testing.T, o op) state {
			// A consistent read through a second store on the table,
			// without views, so that reading changes nothing the tested
			// store knows.
			st, err := reader.get(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}})
	}
	return out
}

// TestClockSkew: two instances share a store, one clock 2 s ahead of the
// other, and ask in random order, across many windows. After every
// admission the stored state, read back and judged at the leading clock
// (the latest time any instance has seen), must hold at most the limit:
//
//   - fixed window: each window's item counts at most the limit, whichever
//     instance wrote it;
//   - sliding window: count + weighted previous count <= limit (a lagging
//     instance never writes a window older than the item's newest);
//   - sliding log: every window-long interval of the log holds at most the
//     limit, not only the one ending now;
//   - gcra: the TAT is at most the tolerance ahead.
func TestClockSkew(t *testing.T) {
	t.Parallel()
	for _, b := range skewBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, alg := range []string{string(FixedWindow), string(SlidingWindow), string(SlidingLog), string(GCRA)} {
				t.Run(alg, func(t *testing.T) {
					const limit, skew = 5, 2 * time.Second
					window := 10 * time.Second
					start := limitertest.WindowStart(limitertest.T0, time.Minute).Add(time.Minute)
					behind := limitertest.NewClock(start)
					ahead := limitertest.NewClock(start.Add(skew))
					p := &policy.Policy{Name: "skew-" + alg, Limit: limit, Window: window, Options: &Options{Algorithm: Algorithm(alg)}}
					a, err := New(Config{Policy: p, Store: b.store, Now: ahead.Now})
					if err != nil {
						t.Fatal(err)
					}
					bh, err := New(Config{Policy: p, Store: b.store, Now: behind.Now})
					if err != nil {
						t.Fatal(err)
					}
					alg0 := a.base.algs[0]
					admitted := map[string]int{}
					ask := func(label string, c *Counter, who string, cost int64) {
						t.Helper()
						got, err := c.Allow(context.Background(), edgelimit.Request{Key: "k", Cost: cost})
						if err != nil {
							t.Fatalf("%s: %v", label, err)
						}
						if !got.Allowed {
							return
						}
						admitted[who]++
						if msg := checkStored(t, b, alg0, c.clock().UnixNano(), ahead.Now().UnixNano()); msg != "" {
							t.Fatalf("%s, after an admission of %d by the instance %s: %s", label, cost, who, msg)
						}
					}
					// First the boundary, on purpose: the instance behind spends
					// in window i; when the one ahead has entered window i+1 and
					// spent what the weighted count leaves, the one behind (still
					// in window i by its clock) must not add to window i.
					behind.Set(start.Add(time.Second))
					ahead.Set(start.Add(time.Second + skew))
					for i := range 2 {
						ask(fmt.Sprintf("boundary, behind %d", i), bh, "behind", 1)
					}
					behind.Set(start.Add(window - 1500*time.Millisecond))
					ahead.Set(start.Add(window - 1500*time.Millisecond + skew))
					for i := range limit {
						ask(fmt.Sprintf("boundary, ahead %d", i), a, "ahead", 1)
					}
					for i := range limit {
						ask(fmt.Sprintf("boundary, behind %d", i), bh, "behind", 1)
					}
					// Then a long random interleaving.
					rng := rand.New(rand.NewPCG(7, uint64(len(alg))))
					for step := range b.steps {
						d := time.Duration(rng.Int64N(int64(700 * time.Millisecond)))
						ahead.Advance(d)
						behind.Advance(d)
						c, who := a, "ahead"
						if rng.IntN(2) == 0 {
							c, who = bh, "behind"
						}
						ask(fmt.Sprintf("step %d", step), c, who, 1+rng.Int64N(2))
					}
					t.Logf("admitted: %v", admitted)
				})
			}
		})
	}
}

// checkStored reads the item an admission at t wrote and judges it at lead.
func checkStored(t *testing.T, b skewBackend, alg algorithm, at, lead int64) string {
	t.Helper()
	switch a := alg.(type) {
	case *fixedWindow:
		for _, tt := range []int64{at, lead} {
			st := b.read(t, newOp(a, a.itemFor("k", noShard, tt), 0, tt))
			if st.n > a.limit {
				return fmt.Sprintf("the window of %d counts %d, above the limit %d", tt, st.n, a.limit)
			}
		}
	case *slidingWindow:
		st := b.read(t, newOp(a, a.itemFor("k", noShard, lead), 0, lead))
		i, te := a.at(&st, lead)
		c, p := a.counts(&st, i)
		if used := c + a.share(p, i, te); used > a.limit {
			return fmt.Sprintf("estimate %d (%d + weighted %d) at the leading clock, above the limit %d", used, c, p, a.limit)
		}
	case *slidingLog:
		st := b.read(t, newOp(a, a.itemFor("k", noShard, lead), 0, lead))
		bs := buckets(&st)
		for _, end := range bs {
			var n int64
			for _, x := range bs {
				if x.ms > end.ms-a.wms && x.ms <= end.ms {
					n += x.units
				}
			}
			if n > a.limit {
				return fmt.Sprintf("%d units in the window ending at %d ms, above the limit %d (log %v)", n, end.ms, a.limit, bs)
			}
		}
		if used := a.used(&st, lead); used > a.limit {
			return fmt.Sprintf("%d units in the window at the leading clock, above the limit %d", used, a.limit)
		}
	case *gcra:
		st := b.read(t, newOp(a, a.itemFor("k", noShard, lead), 0, lead))
		if ahead := st.n - lead; ahead > a.tau {
			return fmt.Sprintf("TAT %s ahead of the leading clock, above the tolerance %s", time.Duration(ahead), time.Duration(a.tau))
		}
	}
	return ""
}
