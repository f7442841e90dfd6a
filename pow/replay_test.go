package pow

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestReplayCacheSpend(t *testing.T) {
	c := NewReplayCache(0)
	exp := t0.Add(time.Minute)
	id := ID{1}
	steps := []struct {
		name     string
		from, to int64
		at       time.Time
		want     bool
	}{
		{"proof once", 0, 2, t0, true},
		{"proof again", 0, 2, t0, false},
		{"count 2", 2, 4, t0, true},
		{"count 2 again", 2, 4, t0, false},
		{"older count", 0, 2, t0, false},
		{"skip ahead (token from another instance)", 8, 10, t0, true},
		{"older than the skip", 4, 6, t0, false},
		{"bad span", 12, 12, t0, false},
		{"negative", -1, 1, t0, false},
		{"after expiry the entry is gone", 0, 2, exp, true},
	}
	for _, s := range steps {
		if got := c.Spend(id, s.from, s.to, exp, s.at); got != s.want {
			t.Errorf("%s: Spend(%d, %d, at +%v) = %v, want %v", s.name, s.from, s.to, s.at.Sub(t0), got, s.want)
		}
	}
}

func TestReplayCacheUnspend(t *testing.T) {
	c := NewReplayCache(0)
	exp := t0.Add(time.Minute)
	id := ID{2}
	c.Spend(id, 0, 1, exp, t0)
	c.Spend(id, 1, 2, exp, t0)
	if c.Unspend(id, 0, 1) {
		t.Error("Unspend(0, 1) after a later spend = true, want false")
	}
	if !c.Unspend(id, 1, 2) {
		t.Fatal("Unspend(1, 2) = false, want true")
	}
	if !c.Spend(id, 1, 2, exp, t0) {
		t.Error("Spend(1, 2) after its Unspend = false, want true")
	}
	c.Unspend(id, 1, 2)
	if !c.Unspend(id, 0, 1) || c.Len() != 0 {
		t.Errorf("Unspend back to 0 left %d entries, want 0", c.Len())
	}
	if !c.Spend(id, 0, 1, exp, t0) {
		t.Error("proof spent again after a full Unspend = false, want true")
	}
	if c.Unspend(ID{9}, 0, 1) {
		t.Error("Unspend of an unknown ID = true")
	}
}

func TestReplayCacheBounded(t *testing.T) {
	const max = 100
	c := NewReplayCache(max)
	// 300 entries, expiring in order: the cache never holds more than max,
	// and evicts the ones closest to expiry first.
	for i := range 300 {
		id := ID{byte(i), byte(i >> 8)}
		if !c.Spend(id, 0, 1, t0.Add(time.Hour+time.Duration(i)*time.Second), t0) {
			t.Fatalf("Spend(%d) = false", i)
		}
		if n := c.Len(); n > max {
			t.Fatalf("after %d spends Len = %d, want <= %d", i+1, n, max)
		}
	}
	if got := c.Evicted(); got != 200 {
		t.Errorf("Evicted = %d, want 200", got)
	}
	if c.Spend(ID{299 & 0xff, 299 >> 8}, 0, 1, t0.Add(2*time.Hour), t0) {
		t.Error("the newest entry was evicted")
	}
	if !c.Spend(ID{0, 0}, 0, 1, t0.Add(2*time.Hour), t0) {
		t.Error("the oldest entry was not evicted")
	}
	// Everything expires: the cache empties without evicting.
	before := c.Evicted()
	c.Spend(ID{0xff, 0xff}, 0, 1, t0.Add(4*time.Hour), t0.Add(3*time.Hour))
	if n := c.Len(); n != 1 || c.Evicted() != before {
		t.Errorf("after expiry Len = %d, Evicted +%d; want 1, +0", n, c.Evicted()-before)
	}
}

// TestReplayCacheHeapStaysBounded extends one entry's expiry many times
// (tokens of one chain minted at different instants): stale heap items must
// not grow without bound.
func TestReplayCacheHeapStaysBounded(t *testing.T) {
	c := NewReplayCache(10)
	for i := range 10000 {
		c.Spend(ID{7}, int64(i), int64(i+1), t0.Add(time.Hour+time.Duration(i)*time.Millisecond), t0)
		c.Spend(ID{8}, 0, 1, t0.Add(time.Hour), t0)
		c.Unspend(ID{8}, 0, 1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.byExp); n > 2*c.max+64 {
		t.Errorf("heap holds %d items for %d entries", n, len(c.entries))
	}
}

func TestReplayCacheConcurrent(t *testing.T) {
	c := NewReplayCache(1000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				if c.Spend(ID{byte(i), byte(i >> 8)}, 0, 1, t0.Add(time.Hour), t0) {
					mu.Lock()
					won++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if won != 500 {
		t.Errorf("%d spends succeeded for 500 IDs spent by 8 goroutines, want 500", won)
	}
}

// TestReplayCacheMemory measures the memory of a full default-size cache.
func TestReplayCacheMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("measures memory")
	}
	per := measureReplayMemory(DefaultReplayEntries)
	t.Logf("replay cache: about %.0f bytes per entry, %.1f MiB for %d entries", per, per*DefaultReplayEntries/(1<<20), DefaultReplayEntries)
}

func measureReplayMemory(n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := NewReplayCache(n)
	for i := range n {
		c.Spend(ID{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)}, 0, 1, t0.Add(time.Hour+time.Duration(i)), t0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}
