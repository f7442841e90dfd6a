package powgate_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/powgate"
)

const goroutines = 64

// run starts n goroutines at once and waits for them.
func run(n int, f func(i int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			f(i)
		}()
	}
	start.Done()
	done.Wait()
}

// challenges returns n solved proofs of challenges the Gate issued for key.
func challenges(t *testing.T, g edgelimit.Limiter, key string, n int) []string {
	t.Helper()
	proofs := make([]string, n)
	for i := range proofs {
		d, err := g.Allow(ctx, request(key, ""))
		if err != nil {
			t.Fatal(err)
		}
		proofs[i] = mustChallenge(t, "challenge", d)
	}
	return proofs
}

// TestConcurrentProofs: 64 goroutines against one durable limiter of 40
// that asks every request for a proof. With a distinct proof each, exactly
// 40 are admitted (never more than the hard limit, no spurious denial);
// with 8 proofs each sent by 8 goroutines, each proof admits exactly one.
func TestConcurrentProofs(t *testing.T) {
	for _, in := range []inner{durableInner(durablecounter.FixedWindow, true), durableInner(durablecounter.GCRA, true)} {
		t.Run(in.name, func(t *testing.T) {
			f := newFixture(t, in, 40, time.Minute, powgate.Options{Above: 0, Bits: 4})
			proofs := challenges(t, f.gate, keyA, goroutines)
			var admitted, challenged atomic.Int64
			run(goroutines, func(i int) {
				d, err := f.gate.Allow(ctx, request(keyA, proofs[i]))
				switch {
				case err != nil:
					t.Error(err)
				case d.Allowed:
					admitted.Add(1)
				case powgate.Challenged(d):
					challenged.Add(1)
				}
			})
			if admitted.Load() != 40 || challenged.Load() != 0 {
				t.Fatalf("%d distinct proofs: %d admitted, %d challenged; want exactly 40 admitted, none challenged (the rest denied by the hard limit)",
					goroutines, admitted.Load(), challenged.Load())
			}
			if got := f.peekInner(keyA).Remaining; got != 0 {
				t.Fatalf("remaining %d, want 0", got)
			}

			shared := challenges(t, f.gate, keyB, 8)
			var per [8]atomic.Int64
			run(goroutines, func(i int) {
				d, err := f.gate.Allow(ctx, request(keyB, shared[i%8]))
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					per[i%8].Add(1)
				} else if !powgate.Challenged(d) {
					t.Errorf("a replay of a proof: %+v, want a challenge", d)
				}
			})
			total := int64(0)
			for i := range per {
				if n := per[i].Load(); n != 1 {
					t.Errorf("proof %d sent by 8 goroutines admitted %d requests, want exactly 1", i, n)
				}
				total += per[i].Load()
			}
			if got := f.peekInner(keyB).Remaining; got != 40-total {
				t.Errorf("key B: remaining %d after %d admissions, want %d: a replay spent units", got, total, 40-total)
			}
		})
	}
}

// TestConcurrentInstances: two instances (Gates with their own replay
// caches) over one shared store: a proof replayed on both within its TTL
// is admitted once per instance, the bound the package documents.
func TestConcurrentInstances(t *testing.T) {
	pol := &policy.Policy{Name: "search", Limit: 40, Window: time.Minute}
	now := func() time.Time { return t0 }
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	var gates [2]edgelimit.Limiter
	for i := range gates {
		c, err := durablecounter.New(durablecounter.Config{Policy: pol, Options: &durablecounter.Options{DenyCache: true}, Store: store, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if gates[i], err = powgate.Wrap(c, powgate.Config{Policy: pol, Options: powgate.Options{Above: 0, Bits: 4}, Secrets: [][]byte{secret},
			Now: now, Replay: pow.NewReplayCache(0)}); err != nil {
			t.Fatal(err)
		}
	}
	proofs := challenges(t, gates[0], keyA, 8)
	var per [8]atomic.Int64
	run(goroutines, func(i int) {
		d, err := gates[i%2].Allow(ctx, request(keyA, proofs[i/2%8]))
		if err != nil {
			t.Error(err)
		}
		if d.Allowed {
			per[i/2%8].Add(1)
		}
	})
	for i := range per {
		if n := per[i].Load(); n != 2 {
			t.Errorf("proof %d replayed on 2 instances admitted %d requests, want 2 (once per instance)", i, n)
		}
	}
}

// TestConcurrentThreshold: 64 goroutines without proofs on a limit of 40
// gated above 20, against every inner limiter. The threshold is soft:
// requests that all peek before any spends may all pass it (and then the
// last ones meet the hard limit, and are denied without a challenge), but
// never the hard limit; and every challenged request spent nothing.
func TestConcurrentThreshold(t *testing.T) {
	for _, in := range inners {
		t.Run(in.name, func(t *testing.T) {
			f := newFixture(t, in, 40, time.Minute, powgate.Options{Above: 20, Bits: 4})
			var admitted, challenged, denied atomic.Int64
			run(goroutines, func(int) {
				d, err := f.gate.Allow(ctx, request(keyA, ""))
				switch {
				case err != nil:
					t.Error(err)
				case d.Allowed:
					admitted.Add(1)
				case powgate.Challenged(d):
					challenged.Add(1)
				default:
					denied.Add(1)
				}
			})
			a, c, n := admitted.Load(), challenged.Load(), denied.Load()
			t.Logf("%d at once: %d admitted, %d challenged, %d denied", goroutines, a, c, n)
			if a < 20 || a > 40 || a+c+n != goroutines || n > 0 && a != 40 {
				t.Fatalf("%d admitted, %d challenged, %d denied; want 20 to 40 admitted, the rest challenged, or denied once 40 are", a, c, n)
			}
			if got := f.peekInner(keyA).Remaining; got != 40-a {
				t.Fatalf("remaining %d after %d admissions, want %d: a challenge spent", got, a, 40-a)
			}
		})
	}
}
