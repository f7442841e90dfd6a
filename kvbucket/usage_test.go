package kvbucket

import (
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// Issue 20, item 5: kv's usage no longer under-reports an idle key's
// spending without a bound. At fixed instants: instance a spends 4 of a
// key's 6 tokens, the last 2 within its share (unwritten); a reader that
// does not know the key (an operator's usage) sees 4 left. Once a's idle
// write-back has looked twice with no request of the key between (half a
// sync interval apart while its process runs; WriteIdle here, on a clock
// of the test's), the reader sees 2, and exactly 2 are then admitted by
// another instance. A grant shows in usage and is admitted as well.
func TestUsageCountsUnwrittenSpending(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		pol := kvPolicy("idle", 6, 6, time.Hour, time.Second)
		clk.Set(t0)
		a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
		req := edgelimit.Request{Key: "k"}
		allow := func(b *Bucket, n int) int {
			got := 0
			for range n {
				d, err := b.Allow(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					got++
				}
			}
			return got
		}
		usage := func() edgelimit.Usage {
			t.Helper()
			u, err := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now}).Usage(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			return u
		}
		// The first sync interval writes each admission through; after
		// it, a sync grants a's share, which it spends without writing.
		if got := allow(a, 1); got != 1 {
			t.Fatal("first request denied")
		}
		clk.Set(t0.Add(time.Second))
		if got := allow(a, 3); got != 3 {
			t.Fatalf("%d of 3 admitted", got)
		}
		if u := usage(); u.Remaining != 4 {
			t.Fatalf("before the write-back: usage says %d left; want 4 (the share's 2 unwritten)", u.Remaining)
		}
		if dirty := a.WriteIdle(ctx); dirty != 1 {
			t.Errorf("first look: %d keys with unwritten changes, want 1", dirty)
		}
		if u := usage(); u.Remaining != 4 {
			t.Errorf("after one look: usage says %d; the key is written only once a second look finds it idle", u.Remaining)
		}
		a.WriteIdle(ctx)
		if u := usage(); u.Remaining != 2 || u.Quota != 2 || u.Grant.Units != 0 {
			t.Fatalf("after the write-back: usage %+v; want 2 left", u)
		}
		if a.WriteIdle(ctx) != 0 {
			t.Error("unwritten changes left after the write-back")
		}
		b := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
		if got := allow(b, 20); got != 2 {
			t.Errorf("after usage said 2: %d admitted", got)
		}
		// A grant: usage counts it, and that many are admitted.
		until := clk.Now().Add(time.Hour)
		if err := b.Grant(ctx, req, 3, until); err != nil {
			t.Fatal(err)
		}
		if u := usage(); u.Remaining != 3 || u.Quota != 0 || u.Grant.Units != 3 || !u.Grant.Until.Equal(until) || !u.Allowed {
			t.Errorf("with a grant of 3: usage %+v; want 3 left, all of the grant's", u)
		}
		if got := allow(b, 20); got != 3 {
			t.Errorf("after usage said 3 (a grant): %d admitted", got)
		}
	})
}

// Without a clock of its own, the Bucket writes an idle key back by
// itself: the reader sees the share's spending once the write-back's
// goroutine has looked twice. (The test waits for it, up to a minute; it
// asserts no wall-clock bound.)
func TestIdleKeysAreWrittenBack(t *testing.T) {
	kv := NewMemory(MemoryConfig{})
	pol := kvPolicy("idle-timer", 6, 6, time.Hour, 20*time.Millisecond)
	clk := newClock(t0)
	a := mustNew(t, Config{Policy: pol, KV: kv})
	at := func(d time.Duration) edgelimit.Request { return edgelimit.Request{Key: "k", At: t0.Add(d)} }
	for i, d := range []time.Duration{0, time.Second, time.Second, time.Second} {
		if got, err := a.Allow(ctx, at(d)); err != nil || !got.Allowed {
			t.Fatalf("request %d: %+v, %v", i, got, err)
		}
	}
	reader := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
	clk.Set(t0.Add(time.Second))
	deadline := time.Now().Add(time.Minute)
	for {
		u, err := reader.Usage(ctx, edgelimit.Request{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if u.Remaining == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute on, usage still says %d left; want 2", u.Remaining)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for a.writingIdle.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if a.writingIdle.Load() {
		t.Error("the write-back goroutine still runs with nothing left unwritten")
	}
}
