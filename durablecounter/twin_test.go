package durablecounter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/policy"
)

// twinPair returns a Counter of alg on a Memory store of its own (the
// store that fails, in production) and its twin, at a clock the test sets.
func twinPair(t *testing.T, alg durablecounter.Algorithm, limit, burst int64, shards int, now *time.Time) (*durablecounter.Counter, edgelimit.Limiter) {
	t.Helper()
	c, err := durablecounter.New(durablecounter.Config{
		Policy:  &policy.Policy{Name: "twin", Limit: limit, Window: time.Second},
		Options: &durablecounter.Options{Algorithm: alg, Burst: burst, Shards: shards, DenyCache: true},
		// A store shared with other instances, which the deny cache fronts.
		Store: durablecounter.AsShared(durablecounter.NewMemory(durablecounter.MemoryConfig{})),
		Now:   func() time.Time { return *now },
	})
	if err != nil {
		t.Fatal(err)
	}
	tw, err := c.Local()
	if err != nil {
		t.Fatal(err)
	}
	return c, tw
}

// admits counts what l admits of n requests of one unit.
func admits(t *testing.T, l edgelimit.Limiter, key string, n int) int {
	t.Helper()
	got := 0
	for range n {
		d, err := l.Allow(context.Background(), edgelimit.Request{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			got++
		}
	}
	return got
}

// TestTwinStartsFromWhatTheStoreLeft (issue "when the store fails, fail
// fast", item 2: the twin started full each time the instance fell back,
// a burst on top of what the store had counted): a twin that heard the
// store's decisions admits only what the last one left.
func TestTwinStartsFromWhatTheStoreLeft(t *testing.T) {
	for _, tt := range []struct {
		alg    durablecounter.Algorithm
		limit  int64
		burst  int64
		shards int
	}{
		{durablecounter.GCRA, 10, 20, 1},
		{durablecounter.FixedWindow, 20, 0, 1},
		{durablecounter.SlidingWindow, 20, 0, 1},
		{durablecounter.SlidingLog, 20, 0, 1},
		{durablecounter.FixedWindow, 20, 0, 4},
	} {
		t.Run(fmt.Sprintf("%s/%d", tt.alg, tt.shards), func(t *testing.T) {
			now := t0
			c, tw := twinPair(t, tt.alg, tt.limit, tt.burst, tt.shards, &now)
			f := tw.(edgelimit.Follower)
			for i := range 13 {
				req := edgelimit.Request{Key: "k"}
				d, err := c.Allow(context.Background(), req)
				if err != nil || !d.Allowed {
					t.Fatalf("admission %d: %+v, %v", i, d, err)
				}
				f.Follow(req, d)
			}
			// A sharded policy's decision reports its shard's units left (a
			// lower bound of the policy's): the twin may admit fewer.
			if got := admits(t, tw, "k", 20); got != 7 && (tt.shards == 1 || got > 7) {
				t.Errorf("the twin admitted %d after the store's 13 of 20, want 7", got)
			}
			if got := admits(t, tw, "other", 30); got != 20 {
				t.Errorf("a key the instance knew nothing of: %d admitted, want the full 20", got)
			}
		})
	}
}

// TestTwinSharesTheDenyCache: a denial the Counter's deny cache holds
// holds for the twin, and a denial of the twin enters the cache, so that
// the Counter answers the key without its store until the entry expires.
func TestTwinSharesTheDenyCache(t *testing.T) {
	now := t0
	c, tw := twinPair(t, durablecounter.GCRA, 10, 10, 1, &now)
	if got := admits(t, c, "spent", 11); got != 10 {
		t.Fatalf("store admitted %d, want 10", got)
	}
	if got := admits(t, tw, "spent", 5); got != 0 {
		t.Errorf("twin admitted %d of a key the deny cache holds, want 0", got)
	}
	if got := admits(t, tw, "local", 11); got != 10 {
		t.Fatalf("twin admitted %d, want 10", got)
	}
	d, err := c.Allow(context.Background(), edgelimit.Request{Key: "local"})
	if err != nil || d.Allowed {
		t.Errorf("after the twin's denial the Counter answered %+v, %v; want the cached denial", d, err)
	}
	now = now.Add(durablecounter.DefaultDenyCacheMaxAge)
	if got := admits(t, c, "local", 10); got != 10 {
		t.Errorf("once the entry expired the store admitted %d, want its 10", got)
	}
}
