package kvbucket

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// delayPolicy is 2 a second (one token every 500ms), burst 1, max_delay
// 1500ms: nginx's `rate=2r/s burst=3` without nodelay.
func delayPolicy(name string, sync time.Duration) *policy.Policy {
	p := kvPolicy(name, 2, 1, time.Second, sync)
	p.MaxDelay = 1500 * time.Millisecond
	return p
}

// delayStep is one request of a schedule and its fate: admitted with the
// wait delay (0: served at once), or denied with retry (the time until a
// request would be served without waiting).
type delayStep struct {
	at     time.Duration // from t0
	denied bool
	delay  time.Duration
	retry  time.Duration
}

func (s delayStep) String() string {
	if s.denied {
		return fmt.Sprintf("t0+%s denied, retry %s", s.at, s.retry)
	}
	return fmt.Sprintf("t0+%s admitted, wait %s", s.at, s.delay)
}

func runDelaySteps(t *testing.T, b *Bucket, clk *clock, steps []delayStep) {
	t.Helper()
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		d, err := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: 1})
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, s, err)
		}
		got := delayStep{at: s.at, denied: !d.Allowed, delay: d.Delay, retry: d.RetryAfter}
		if got != s {
			t.Errorf("step %d: %s; want %s (%+v)", i, got, s, d)
		}
		if d.Allowed && d.Receipt.At != t0.Add(s.at+d.Delay).UnixNano() {
			t.Errorf("step %d: receipt at t0+%s, want the turn t0+%s", i, time.Duration(d.Receipt.At-t0.UnixNano()), s.at+d.Delay)
		}
	}
}

// TestMaxDelaySchedule: at fixed instants, a request the bucket holds a
// token for is admitted at once, one that it will hold one for within
// max_delay is admitted for its turn (Delay: exactly the time until the
// bucket is back within its capacity, the requests before it counted),
// and one beyond is denied, its RetryAfter the time until a request would
// be served without waiting. The same on every KV, written through (the
// key's first sync interval, NoCache) and decided from the cache (after
// it, one instance: the whole bucket).
func TestMaxDelaySchedule(t *testing.T) {
	ms := time.Millisecond
	steps := []delayStep{
		// Five at once: one served, three queued 500ms apart, one refused.
		{at: 0, delay: 0},
		{at: 0, delay: 500 * ms},
		{at: 0, delay: 1000 * ms},
		{at: 0, delay: 1500 * ms},
		{at: 0, denied: true, retry: 2000 * ms},
		// 600ms on: 1.2 tokens came back; the queue ends 1.4s away.
		{at: 600 * ms, delay: 1400 * ms},
		{at: 600 * ms, denied: true, retry: 1900 * ms},
		// The queue ends at 2.5s (t0+2000ms is the last turn, +500ms):
		// at 3s the bucket is full again.
		{at: 3000 * ms, delay: 0},
		{at: 3000 * ms, delay: 500 * ms},
		{at: 3100 * ms, delay: 900 * ms},
		{at: 3100 * ms, delay: 1400 * ms},
		{at: 3100 * ms, denied: true, retry: 1900 * ms},
		{at: 4900 * ms, delay: 100 * ms},
		{at: 6000 * ms, delay: 0},
	}
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		for _, noCache := range []bool{false, true} {
			t.Run(fmt.Sprintf("nocache=%v", noCache), func(t *testing.T) {
				clk.Set(t0)
				b := mustNew(t, Config{Policy: delayPolicy(fmt.Sprintf("sched%v", noCache), time.Second), KV: k.kv, Now: clk.Now, NoCache: noCache})
				runDelaySteps(t, b, clk, steps)
			})
		}
	})
}

// TestMaxDelayRefundGivesTheTurnBack: a waiting request refunded before
// its turn (a wait cut short) gives its token back whole, so the next
// request gets the turn; one refunded after its turn gives back what
// refill has not brought back since the turn, never more.
func TestMaxDelayRefundGivesTheTurnBack(t *testing.T) {
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{Now: clk.Now})
	b := mustNew(t, Config{Policy: delayPolicy("refund", time.Second), KV: kv, Now: clk.Now})
	req := edgelimit.Request{Key: "k", Cost: 1}
	var ds []edgelimit.Decision
	for range 3 {
		d, err := b.Allow(ctx, req)
		if err != nil || !d.Allowed {
			t.Fatalf("Allow: %+v, %v", d, err)
		}
		ds = append(ds, d)
	}
	// Cut 300ms into its 1s wait: all of its token comes back.
	clk.Add(300 * time.Millisecond)
	if err := b.Refund(ctx, req, ds[2]); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Allow(ctx, req); !d.Allowed || d.Delay != 700*time.Millisecond {
		t.Errorf("after the refund: %+v; want the turn given back, 700ms away", d)
	}
	// The request of the first turn (t0+500ms), refunded at t0+800ms: 300ms
	// of its token came back since its turn, 200ms is given back, and the
	// next request's turn is 200ms sooner than without the refund: 500ms
	// away, not 700ms.
	clk.Set(t0.Add(800 * time.Millisecond))
	if err := b.Refund(ctx, req, ds[1]); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Allow(ctx, req); !d.Allowed || d.Delay != 500*time.Millisecond {
		t.Errorf("after the late refund: %+v; want a turn 500ms away", d)
	}
}

// TestMaxDelayChargeReportsNow: a Charge's decision is the state now (a
// request that would have to wait is not "allowed"), with no turn.
func TestMaxDelayChargeReportsNow(t *testing.T) {
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{Now: clk.Now})
	b := mustNew(t, Config{Policy: delayPolicy("charge", time.Second), KV: kv, Now: clk.Now})
	d, err := b.Charge(ctx, edgelimit.Request{Key: "k", Cost: 1})
	if err != nil || d.Allowed || d.Delay != 0 {
		t.Errorf("Charge of the whole bucket: %+v, %v; want not allowed, no Delay", d, err)
	}
	if d, _ := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: 1}); !d.Allowed || d.Delay != 500*time.Millisecond {
		t.Errorf("Allow after the charge: %+v; want a turn 500ms away", d)
	}
}

// TestMaxDelayNegative: a negative max_delay is a configuration error.
func TestMaxDelayNegative(t *testing.T) {
	p := delayPolicy("neg", time.Second)
	p.MaxDelay = -time.Second
	if _, err := New(Config{Policy: p, KV: NewMemory(MemoryConfig{})}); err == nil {
		t.Error("New with max_delay -1s: nil error, want ErrConfig")
	}
}

// TestMaxDelayUnderConcurrency: 64 goroutines on one key, the clock
// standing still in each phase (so no wall-clock luck: a phase is one
// instant however slow the machine). One instance alone is exactly the
// bucket and its turns: each phase admits burst + rate×max_delay (1 + 10)
// and hands out each turn 0, 100ms … 1s once, on every KV, cold (written
// through) and warm (from the cache). Two instances (32 goroutines each)
// on a cold key are exact too (every admission a reservation); warm, they
// stay within kv's bound with max_delay, B + r·D + H_2·(B + r·(D + S)).
func TestMaxDelayUnderConcurrency(t *testing.T) {
	const limit, goroutines = 10, 64
	pol := func(name string) *policy.Policy {
		p := kvPolicy(name, limit, 1, time.Second, time.Second)
		p.MaxDelay = time.Second
		return p
	}
	wantTurns := make([]time.Duration, 0, limit+1)
	for i := range limit + 1 {
		wantTurns = append(wantTurns, time.Duration(i)*100*time.Millisecond)
	}
	// phase sends goroutines requests at once, round-robin over bs, and
	// returns the admitted requests' waits, sorted.
	phase := func(t *testing.T, bs []*Bucket) []time.Duration {
		var mu sync.Mutex
		var turns []time.Duration
		var wg sync.WaitGroup
		for i := range goroutines {
			b := bs[i%len(bs)]
			wg.Go(func() {
				d, err := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					turns = append(turns, d.Delay)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(turns)
		return turns
	}
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		t.Run("one instance", func(t *testing.T) {
			clk.Set(t0)
			b := mustNew(t, Config{Policy: pol("one"), KV: k.kv, Now: clk.Now})
			// Cold, then warm (the first sync interval over), then warm again.
			for _, at := range []time.Duration{0, 3 * time.Second, 6 * time.Second} {
				clk.Set(t0.Add(at))
				if got := phase(t, []*Bucket{b}); !slices.Equal(got, wantTurns) {
					t.Errorf("t0+%s: admitted %d with waits %v; want exactly %v", at, len(got), got, wantTurns)
				}
			}
		})
		t.Run("two instances", func(t *testing.T) {
			clk.Set(t0)
			p := pol("two")
			bs := []*Bucket{mustNew(t, Config{Policy: p, KV: k.kv, Now: clk.Now}), mustNew(t, Config{Policy: p, KV: k.kv, Now: clk.Now})}
			if got := phase(t, bs); !slices.Equal(got, wantTurns) {
				t.Errorf("cold: admitted %d with waits %v; want exactly %v (every admission a reservation)", len(got), got, wantTurns)
			}
			// B + r·D + H_2·(B + r·(D + S)) = 1 + 10 + 1.5·(1 + 20).
			const bound = 1 + 10 + 31
			for _, at := range []time.Duration{3 * time.Second, 6 * time.Second} {
				clk.Set(t0.Add(at))
				got := phase(t, bs)
				if len(got) > bound || len(got) < limit+1 {
					t.Errorf("warm at t0+%s: admitted %d; want %d to %d", at, len(got), limit+1, bound)
				}
				for _, d := range got {
					if d > time.Second {
						t.Errorf("warm at t0+%s: a wait of %s, beyond max_delay", at, d)
					}
				}
				t.Logf("warm at t0+%s: admitted %d, waits %v", at, len(got), got)
			}
		})
	})
}

// TestMaxDelayPeekAndGrant: Peek answers as Allow would, with the turn,
// spending nothing; an operator's grant pays only for what the wait
// cannot: a request that can wait for a turn waits, one whose turn would
// be beyond max_delay is paid by the grant, at once.
func TestMaxDelayPeekAndGrant(t *testing.T) {
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{Now: clk.Now})
	b := mustNew(t, Config{Policy: delayPolicy("grant", time.Second), KV: kv, Now: clk.Now})
	req := edgelimit.Request{Key: "k", Cost: 1}
	if d, err := b.Allow(ctx, req); err != nil || !d.Allowed || d.Delay != 0 {
		t.Fatalf("first: %+v, %v", d, err)
	}
	for range 2 {
		if d, err := b.Peek(ctx, req); err != nil || !d.Allowed || d.Delay != 500*time.Millisecond {
			t.Errorf("Peek: %+v, %v; want allowed for a turn 500ms away (and nothing spent)", d, err)
		}
	}
	if err := b.Grant(ctx, req, 1, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond} {
		d, err := b.Allow(ctx, req)
		if err != nil || !d.Allowed || d.Delay != want || d.Receipt.ID == b.grantReceiptID(b.cacheEntry("k").hash) {
			t.Errorf("Allow: %+v, %v; want a turn %s away, paid by the bucket", d, err, want)
		}
	}
	d, err := b.Allow(ctx, req)
	if err != nil || !d.Allowed || d.Delay != 0 || d.Receipt.ID != b.grantReceiptID(b.cacheEntry("k").hash) {
		t.Errorf("beyond max_delay: %+v, %v; want paid by the grant, at once", d, err)
	}
	if d, _ := b.Allow(ctx, req); d.Allowed {
		t.Errorf("with the grant spent: %+v; want denied", d)
	}
}

// TestMaxDelayMatchesReference: one instance, random arrivals (several at
// one instant, gaps of up to two intervals), against the textbook rule in
// nanoseconds: tat' = max(tat, n) + T is admitted iff tat' − n − B·T ≤ D,
// its wait tat' − n − B·T (at least 0), and a denial leaves tat as it was.
// Cached (syncs every 1s) and NoCache.
func TestMaxDelayMatchesReference(t *testing.T) {
	const T = 250 * time.Millisecond // 4 a second
	for _, tc := range []struct {
		burst int64
		delay time.Duration
	}{{1, 1500 * time.Millisecond}, {3, 700 * time.Millisecond}, {2, 10 * time.Second}} {
		for _, noCache := range []bool{false, true} {
			t.Run(fmt.Sprintf("burst=%d,max_delay=%s,nocache=%v", tc.burst, tc.delay, noCache), func(t *testing.T) {
				clk := newClock(t0)
				p := kvPolicy("ref", 4, tc.burst, time.Second, time.Second)
				p.MaxDelay = tc.delay
				b := mustNew(t, Config{Policy: p, KV: NewMemory(MemoryConfig{Now: clk.Now}), Now: clk.Now, NoCache: noCache})
				rng := rand.New(rand.NewPCG(uint64(tc.burst), uint64(tc.delay)))
				n, tat := t0.UnixNano(), t0.UnixNano()
				tol := int64(tc.burst) * int64(T)
				for i := range 3000 {
					if rng.IntN(3) == 0 {
						n += rng.Int64N(int64(2 * T))
					}
					clk.Set(time.Unix(0, n))
					next := max(tat, n) + int64(T)
					wantOK := next-n-tol <= int64(tc.delay)
					wantWait := time.Duration(max(0, next-n-tol))
					d, err := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: 1})
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed != wantOK || wantOK && d.Delay != wantWait {
						t.Fatalf("request %d at t0+%s: allowed %v wait %s; want %v %s", i, time.Duration(n-t0.UnixNano()), d.Allowed, d.Delay, wantOK, wantWait)
					}
					if wantOK {
						tat = next
					}
				}
			})
		}
	}
}
