package durablecounter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// TestMemorySweepBoundsMemory: 60 windows of 1,000 fresh keys each must
// not leave 60,000 items behind; expired windows are swept as the store
// grows, so it holds at most about twice the live items.
func TestMemorySweepBoundsMemory(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 64} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			store := durablecounter.NewMemory(durablecounter.MemoryConfig{Shards: shards})
			clock := limitertest.NewClock(limitertest.T0)
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &policy.Policy{Name: "p", Limit: 5, Window: time.Second},
				Store:  store, Now: clock.Now,
			})
			if err != nil {
				t.Fatal(err)
			}
			const live = 1000
			most := 0
			for w := range 60 {
				for k := range live {
					key := fmt.Sprintf("w%d-k%d", w, k)
					if d, err := c.Allow(context.Background(), edgelimit.Request{Key: key}); err != nil || !d.Allowed {
						t.Fatalf("Allow(%s) = %+v, %v", key, d, err)
					}
				}
				most = max(most, store.Len())
				clock.Advance(time.Second)
			}
			// Each shard sweeps when it doubles; a sweep keeps the live
			// window, and small shards (< 64 items) are never swept.
			if bound := 4*live + 64*shards; most > bound {
				t.Errorf("the store held up to %d items for %d live ones, want at most %d", most, live, bound)
			}
		})
	}
}

func TestMemoryFull(t *testing.T) {
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{Shards: 1, MaxKeys: 100})
	clock := limitertest.NewClock(limitertest.T0)
	c, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "p", Limit: 5, Window: time.Minute},
		Store:  store, Now: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	allow := func(key string) (edgelimit.Decision, error) {
		return c.Allow(context.Background(), edgelimit.Request{Key: key})
	}
	for k := range 100 {
		if _, err := allow(fmt.Sprint(k)); err != nil {
			t.Fatalf("key %d: %v", k, err)
		}
	}
	if d, err := allow("one-too-many"); !errors.Is(err, durablecounter.ErrStoreFull) {
		t.Errorf("Allow(a new key in a full store) = %+v, %v; want ErrStoreFull", d, err)
	}
	// Keys already counted still decide: nothing live is ever evicted.
	if d, err := allow("7"); err != nil || !d.Allowed || d.Remaining != 3 {
		t.Errorf("Allow(an existing key in a full store) = %+v, %v; want allowed with Remaining 3", d, err)
	}
	clock.Advance(time.Minute) // every item expires
	if d, err := allow("one-too-many"); err != nil || !d.Allowed {
		t.Errorf("Allow(a new key once the old window expired) = %+v, %v; want allowed", d, err)
	}
	if n := store.Len(); n != 1 {
		t.Errorf("Len after the sweep = %d, want 1", n)
	}
}

// TestMemoryAllocationFree: a decision on a key the store already holds
// allocates nothing.
func TestMemoryAllocationFree(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	c, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "p", Limit: 1 << 40, Window: time.Hour},
		Store:  store, Now: func() time.Time { return limitertest.T0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := edgelimit.Request{Key: "Zm9vYmFyYmF6cXV4cXV1eA"}
	if _, err := c.Allow(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = c.Allow(ctx, req) }); n != 0 {
		t.Errorf("Allow on an existing key: %v allocations, want 0", n)
	}
}

// TestSharedClockSkew: two Counters of one policy, clocks 2 s apart, share
// a store. Whatever the skew, no window admits more than the limit.
func TestSharedClockSkew(t *testing.T) {
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	ahead := limitertest.NewClock(limitertest.T0.Add(2 * time.Second))
	behind := limitertest.NewClock(limitertest.T0)
	p := &policy.Policy{Name: "p", Limit: 3, Window: time.Minute}
	a, _ := durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: ahead.Now})
	b, _ := durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: behind.Now})
	admitted := map[int64]int{} // by window start, as each instance saw it
	for i := range 120 {
		for _, x := range []struct {
			c     *durablecounter.Counter
			clock *limitertest.Clock
		}{{a, ahead}, {b, behind}} {
			d, err := x.c.Allow(context.Background(), edgelimit.Request{Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted[limitertest.WindowStart(x.clock.Now(), p.Window).Unix()]++
			}
		}
		_ = i
		ahead.Advance(time.Second)
		behind.Advance(time.Second)
	}
	for w, n := range admitted {
		if n != 3 {
			t.Errorf("window %d admitted %d, want exactly 3", w, n)
		}
	}
}

// TestMemoryKeysOfEveryLength: keys are held inline up to 24 bytes and as
// strings beyond; keys that differ only in length, or only past the 24th
// byte, are separate counts either way.
func TestMemoryKeysOfEveryLength(t *testing.T) {
	t.Parallel()
	c, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "p", Limit: 1, Window: time.Hour},
		Store:  durablecounter.NewMemory(durablecounter.MemoryConfig{}), Now: func() time.Time { return limitertest.T0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	long := "0123456789abcdefghijklmnopqrstuvwxyz"
	var keys []string
	for n := 1; n <= len(long); n++ {
		keys = append(keys, long[:n], long[:n]+"\x00")
	}
	keys = append(keys, long+"A", long+"B")
	for round, want := range []bool{true, false} {
		for _, k := range keys {
			d, err := c.Allow(ctx, edgelimit.Request{Key: k})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != want {
				t.Errorf("round %d, key %q (%d bytes): allowed %v, want %v", round, k, len(k), d.Allowed, want)
			}
		}
	}
}
