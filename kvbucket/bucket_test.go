package kvbucket

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// clock is a settable clock for Config.Now and MemoryConfig.Now.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.Set(t)
	return c
}

func (c *clock) Now() time.Time                 { return time.Unix(0, c.ns.Load()) }
func (c *clock) Set(t time.Time)                { c.ns.Store(t.UnixNano()) }
func (c *clock) Add(d time.Duration)            { c.ns.Add(int64(d)) }
func (c *clock) Tick(d time.Duration) time.Time { return time.Unix(0, c.ns.Add(int64(d))) }

// kvPolicy returns a loaded-looking kv policy.
func kvPolicy(name string, limit, burst int64, window, sync time.Duration) *edgelimit.Policy {
	return &edgelimit.Policy{
		Name: name, Strategy: Strategy,
		Limit: limit, Window: window, Cost: 1,
		OnStoreError: edgelimit.FailOpen, StoreTimeout: 100 * time.Millisecond,
		Options: &Options{Burst: burst, SyncInterval: sync},
	}
}

func mustNew(t testing.TB, cfg Config) *Bucket {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

var ctx = context.Background()

// TestBucketStepTables: a single client sees exact token-bucket behaviour
// through the Bucket, cached or not.
func TestBucketStepTables(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		for _, tc := range stepTables {
			t.Run(fmt.Sprintf("%s/nocache=%v", tc.name, noCache), func(t *testing.T) {
				clk := newClock(t0)
				kv := NewMemory(MemoryConfig{Now: clk.Now})
				b := mustNew(t, Config{
					Policy: kvPolicy("steps", tc.p.Limit, tc.p.Capacity, tc.p.Window, 0),
					KV:     kv, Now: clk.Now, NoCache: noCache,
				})
				for i, st := range tc.steps {
					clk.Set(t0.Add(st.at))
					d, err := b.Allow(ctx, edgelimit.Request{Key: "client", Cost: st.cost})
					if err != nil {
						t.Fatalf("step %d: Allow: %v", i, err)
					}
					checkStep(t, i, st, allowResult{d.Allowed, d.Remaining, d.Reset, d.RetryAfter})
				}
			})
		}
	}
}

func TestNewValidates(t *testing.T) {
	kv := NewMemory(MemoryConfig{})
	good := kvPolicy("p", 10, 10, time.Second, 0)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no policy", Config{KV: kv}, "Policy is required"},
		{"no kv", Config{Policy: good}, "KV is required"},
		{"durable policy", Config{Policy: &edgelimit.Policy{Name: "d", Strategy: &edgelimit.Strategy{Name: "durable"}, Limit: 1, Window: time.Second}, KV: kv}, "not kv"},
		{"another strategy's options", Config{Policy: &edgelimit.Policy{Name: "g", Limit: 1, Window: time.Second, Options: struct{}{}}, KV: kv}, "not *kvbucket.Options"},
		{"no window", Config{Policy: kvPolicy("p", 1, 1, 0, 0), KV: kv}, "window"},
		{"closed without window", Config{Policy: kvPolicy("p", 0, 0, 0, 0), KV: kv}, "window"},
		{"huge limit", Config{Policy: kvPolicy("p", MaxTokens+1, 1, time.Second, 0), KV: kv}, "limit"},
		{"cost above capacity", Config{Policy: &edgelimit.Policy{Name: "c", Limit: 10, Cost: 7, Window: time.Second}, Options: &Options{Burst: 5}, KV: kv}, "cost 7"},
		{"negative sync", Config{Policy: kvPolicy("p", 1, 1, time.Second, -1), KV: kv}, "sync interval"},
		{"negative cache", Config{Policy: good, KV: kv, CacheSize: -1}, "cache size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New() = %v, want ErrBadConfig mentioning %q", err, tc.want)
			}
		})
	}
	b, err := New(Config{Policy: good, KV: kv})
	if err != nil {
		t.Fatalf("New(good) = %v", err)
	}
	if b.SyncInterval() != DefaultSyncInterval || b.Params() != (Params{Capacity: 10, Limit: 10, Window: time.Second}) {
		t.Errorf("defaults: SyncInterval %s, Params %+v", b.SyncInterval(), b.Params())
	}
}

func TestBucketRejectsBadKeys(t *testing.T) {
	b := mustNew(t, Config{Policy: kvPolicy("p", 1, 1, time.Second, 0), KV: NewMemory(MemoryConfig{})})
	for _, key := range []string{"", strings.Repeat("k", MaxKeyLength+1)} {
		if _, err := b.Allow(ctx, edgelimit.Request{Key: key}); !errors.Is(err, ErrBadKey) {
			t.Errorf("Allow(key of %d bytes) = %v, want ErrBadKey", len(key), err)
		}
		if err := b.Refund(ctx, edgelimit.Request{Key: key}, edgelimit.Decision{}); !errors.Is(err, ErrBadKey) {
			t.Errorf("Refund(key of %d bytes) = %v, want ErrBadKey", len(key), err)
		}
	}
}

// TestBucketLimitZero: limit 0 closes the route without a store call.
func TestBucketLimitZero(t *testing.T) {
	kv := &faultKV{KV: NewMemory(MemoryConfig{})}
	b := mustNew(t, Config{Policy: kvPolicy("closed", 0, 0, time.Minute, 0), KV: kv})
	d, err := b.Allow(ctx, edgelimit.Request{Key: "k"})
	want := edgelimit.Decision{Window: time.Minute, Reset: time.Minute, RetryAfter: time.Minute}
	if err != nil || d != want {
		t.Errorf("Allow = %+v, %v, want %+v", d, err, want)
	}
	if err := b.Refund(ctx, edgelimit.Request{Key: "k"}, d); err != nil {
		t.Errorf("Refund(the denial) = %v", err)
	}
	if kv.calls.Load() != 0 {
		t.Errorf("%d KV calls, want 0", kv.calls.Load())
	}
}

// TestBucketCachedSkipsKV: within SyncInterval a hot key is decided
// locally; after it, one read and one write.
func TestBucketCachedSkipsKV(t *testing.T) {
	clk := newClock(t0)
	kv := &faultKV{KV: NewMemory(MemoryConfig{Now: clk.Now})}
	b := mustNew(t, Config{Policy: kvPolicy("hot", 100, 100, time.Minute, time.Second), KV: kv, Now: clk.Now})
	req := edgelimit.Request{Key: "k"}
	steps := []struct {
		at         time.Duration
		gets, puts int64
	}{
		{0, 1, 1},
		{100 * time.Millisecond, 1, 1},
		{999 * time.Millisecond, 1, 1},
		{time.Second, 2, 2},
		{1500 * time.Millisecond, 2, 2},
		{2 * time.Second, 3, 3},
	}
	for _, st := range steps {
		clk.Set(t0.Add(st.at))
		if _, err := b.Allow(ctx, req); err != nil {
			t.Fatal(err)
		}
		if g, p := kv.gets.Load(), kv.puts.Load(); g != st.gets || p != st.puts {
			t.Errorf("after t0+%s: %d gets, %d puts, want %d, %d", st.at, g, p, st.gets, st.puts)
		}
	}
	s, _, _ := kv.Get(ctx, "hot#k", Strong)
	if got := s.Tokens / TokenScale; got != 97 {
		t.Errorf("KV holds %d whole tokens, want 97 (100 - 6 spent + 3.33 refilled in 2s)", got)
	}
	st := b.Stats()
	if st.Local != 3 || st.Synced != 3 || st.Writes != 3 || st.Errors != 0 || st.Keys != 1 {
		t.Errorf("Stats = %+v", st)
	}
}

// TestBucketInstancesMerge: two instances sharing a KV see each other's
// spending at their next sync, and the lower count wins.
func TestBucketInstancesMerge(t *testing.T) {
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{Now: clk.Now})
	pol := kvPolicy("shared", 10, 10, time.Hour, time.Second)
	a := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
	b := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
	req := edgelimit.Request{Key: "k"}
	allow := func(l *Bucket, name string, want int64) {
		t.Helper()
		d, err := l.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Remaining != want {
			t.Errorf("%s at t0+%s: allowed %v remaining %d, want true %d", name, clk.Now().Sub(t0), d.Allowed, d.Remaining, want)
		}
	}
	allow(a, "A", 9) // sync: writes 9
	allow(a, "A", 8) // local
	allow(a, "A", 7) // local
	allow(b, "B", 8) // sync: reads A's 9, spends: writes 8; B is contended
	clk.Add(time.Second)
	// A syncs: the KV (8) lacks A's two local spends: 8 - 2 = 6 < A's own 7.
	allow(a, "A", 5)
	clk.Add(time.Second)
	allow(b, "B", 4) // B syncs: reads A's 5; B had spent nothing since
	s, _, _ := kv.Get(ctx, "shared#k", Strong)
	if s.Tokens/TokenScale != 4 {
		t.Errorf("KV holds %d tokens, want 4 (10 - 6 spent)", s.Tokens/TokenScale)
	}
}

// TestBucketContendedFreezesRefill: once a sync has seen another writer,
// local decisions spend only what that sync saw until the next one.
func TestBucketContendedFreezesRefill(t *testing.T) {
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{Now: clk.Now})
	pol := kvPolicy("c", 2, 2, 2*time.Second, 10*time.Second) // 1 token/s
	a := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
	b := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
	req := edgelimit.Request{Key: "k"}
	if d, _ := a.Allow(ctx, req); !d.Allowed {
		t.Fatal("A denied on a full bucket")
	}
	d, _ := b.Allow(ctx, req) // reads A's write: contended
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("B = %+v, want allowed with 0 left", d)
	}
	clk.Add(3 * time.Second) // an uncontended bucket would hold 2 again
	d, _ = b.Allow(ctx, req)
	if d.Allowed {
		t.Errorf("B decided locally from refilled tokens while contended: %+v", d)
	}
	if d.RetryAfter != 7*time.Second {
		t.Errorf("B's RetryAfter = %s, want 7s (until its next sync)", d.RetryAfter)
	}
	clk.Add(7 * time.Second) // B's next sync refills from the KV
	if d, _ = b.Allow(ctx, req); !d.Allowed || d.Remaining != 1 {
		t.Errorf("B after its sync = %+v, want allowed with 1 left", d)
	}
	// A never saw another writer: it still refills locally... but its next
	// sync (10s after its first) merges B's spending.
	if d, _ = a.Allow(ctx, req); !d.Allowed || d.Remaining != 0 {
		t.Errorf("A = %+v, want allowed with 0 left", d)
	}
}

func TestBucketRefund(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("nocache=%v", noCache), func(t *testing.T) {
			clk := newClock(t0)
			kv := &faultKV{KV: NewMemory(MemoryConfig{Now: clk.Now})}
			b := mustNew(t, Config{Policy: kvPolicy("r", 3, 3, time.Hour, time.Second), KV: kv, Now: clk.Now, NoCache: noCache})
			req := edgelimit.Request{Key: "k", Cost: 2}
			d, _ := b.Allow(ctx, req)
			if !d.Allowed || d.Remaining != 1 {
				t.Fatalf("Allow = %+v", d)
			}
			if err := b.Refund(ctx, req, d); err != nil {
				t.Fatal(err)
			}
			if err := b.Refund(ctx, req, d); err != nil { // a second time: capped at capacity
				t.Fatal(err)
			}
			if d, _ := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: 3}); !d.Allowed || d.Remaining != 0 {
				t.Errorf("after refunds, Allow(3) = %+v, want allowed with 0 left", d)
			}
			// A refund of a key this process does not know reads and writes.
			if err := b.RefundAt(ctx, clk.Now(), edgelimit.Request{Key: "other"}); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Second)
			if _, err := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: 1}); err != nil {
				t.Fatal(err)
			}
			s, _, _ := kv.Get(ctx, "r#k", Strong)
			if s.Tokens/TokenScale != 0 {
				t.Errorf("KV holds %d nanotokens after the sync, want less than one token", s.Tokens)
			}
		})
	}
}

// TestBucketCacheIsBounded: the cache keeps about CacheSize keys.
func TestBucketCacheIsBounded(t *testing.T) {
	clk := newClock(t0)
	b := mustNew(t, Config{Policy: kvPolicy("b", 5, 5, time.Minute, 0), KV: NewMemory(MemoryConfig{Now: clk.Now}), Now: clk.Now, CacheSize: 300})
	for i := range 5000 {
		if _, err := b.Allow(ctx, edgelimit.Request{Key: fmt.Sprintf("key-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	st := b.Stats()
	if st.Keys > 300 || st.Keys < 250 || st.Evicted != uint64(5000-st.Keys) {
		t.Errorf("Stats = %+v, want about 300 keys and the rest evicted", st)
	}
	// An evicted key's state is read back from the KV.
	d, err := b.Allow(ctx, edgelimit.Request{Key: "key-0"})
	if err != nil || d.Remaining != 3 {
		t.Errorf("Allow(evicted key) = %+v, %v, want 3 left", d, err)
	}
}

func TestMemoryExpiresAndBounds(t *testing.T) {
	clk := newClock(t0)
	m := NewMemory(MemoryConfig{MaxKeys: 2, Now: clk.Now})
	put := func(k string, ttl time.Duration) {
		t.Helper()
		if err := m.Put(ctx, k, State{Tokens: 1, At: 2}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	get := func(k string) bool {
		t.Helper()
		s, ok, err := m.Get(ctx, k, Eventual)
		if err != nil || (ok && s != State{Tokens: 1, At: 2}) {
			t.Fatalf("Get(%q) = %+v, %v, %v", k, s, ok, err)
		}
		return ok
	}
	put("a", time.Second)
	if !get("a") {
		t.Error("a missing before its ttl")
	}
	clk.Add(time.Second)
	if get("a") {
		t.Error("a present after its ttl")
	}
	put("a", time.Minute)
	put("b", time.Minute)
	get("a") // a is now the most recently used
	put("c", time.Minute)
	if !get("a") || get("b") || !get("c") || m.Len() != 2 {
		t.Errorf("after overflowing 2 keys: a %v b %v c %v len %d, want a and c", get("a"), get("b"), get("c"), m.Len())
	}
	put("a", 0) // delete
	if get("a") {
		t.Error("a present after a put with ttl 0")
	}
	put("d", math.MaxInt64)
	clk.Add(100 * 365 * 24 * time.Hour)
	if !get("d") {
		t.Error("d with the longest ttl expired")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := m.Get(cctx, "d", Eventual); !errors.Is(err, context.Canceled) {
		t.Errorf("Get(canceled) = %v, want context.Canceled", err)
	}
	if err := m.Put(cctx, "d", State{}, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Put(canceled) = %v, want context.Canceled", err)
	}
}

// faultKV wraps a KV, counts calls, and fails, blocks or corrupts on demand.
type faultKV struct {
	KV
	calls, gets, puts atomic.Int64
	getErr, putErr    atomic.Pointer[error]
	// putKey, if set, limits putErr to Puts of that key.
	putKey atomic.Pointer[string]
	// corrupt, if set, replaces what Get returns.
	corrupt func() (State, bool)
	// block, if set, is waited on by Get, which first sends on started
	// (if set and not full).
	block   chan struct{}
	started chan struct{}
}

func (f *faultKV) Get(ctx context.Context, key string, c Consistency) (State, bool, error) {
	f.calls.Add(1)
	f.gets.Add(1)
	if f.block != nil {
		select {
		case f.started <- struct{}{}:
		default:
		}
		select {
		case <-f.block:
		case <-ctx.Done():
			return State{}, false, fmt.Errorf("kvbucket: fake get %q: %w", key, ctx.Err())
		}
	}
	if e := f.getErr.Load(); e != nil {
		return State{}, false, *e
	}
	if f.corrupt != nil {
		s, ok := f.corrupt()
		return s, ok, nil
	}
	return f.KV.Get(ctx, key, c)
}

func (f *faultKV) Put(ctx context.Context, key string, s State, ttl time.Duration) error {
	f.calls.Add(1)
	f.puts.Add(1)
	if e := f.putErr.Load(); e != nil {
		if k := f.putKey.Load(); k == nil || *k == key {
			return *e
		}
	}
	return f.KV.Put(ctx, key, s, ttl)
}

func (f *faultKV) failGets(err error) { f.getErr.Store(&err) }
func (f *faultKV) failPuts(err error) { f.putKey.Store(nil); f.putErr.Store(&err) }

func (f *faultKV) failPutsOf(key string, err error) { f.putKey.Store(&key); f.putErr.Store(&err) }

var errBroken = errors.New("kvbucket: test KV is broken")

// TestBucketKVErrors: a failing KV yields an error and spends nothing; a
// known key is then decided locally until its next sync is due.
func TestBucketKVErrors(t *testing.T) {
	clk := newClock(t0)
	kv := &faultKV{KV: NewMemory(MemoryConfig{Now: clk.Now})}
	b := mustNew(t, Config{Policy: kvPolicy("e", 3, 3, time.Hour, time.Second), KV: kv, Now: clk.Now})
	req := edgelimit.Request{Key: "k"}

	kv.failGets(errBroken)
	if _, err := b.Allow(ctx, req); !errors.Is(err, errBroken) {
		t.Fatalf("Allow with a failing read = %v, want errBroken", err)
	}
	kv.getErr.Store(nil)
	kv.failPuts(errBroken)
	if _, err := b.Allow(ctx, req); !errors.Is(err, errBroken) {
		t.Fatalf("Allow with a failing write = %v, want errBroken", err)
	}
	// The failed sync was the attempt of this interval: decided locally,
	// and neither failed call spent anything.
	calls := kv.calls.Load()
	d, err := b.Allow(ctx, req)
	if err != nil || !d.Allowed || d.Remaining != 2 {
		t.Errorf("Allow after the failures = %+v, %v, want allowed with 2 left", d, err)
	}
	if kv.calls.Load() != calls {
		t.Errorf("a local decision called the KV")
	}
	kv.putErr.Store(nil)
	clk.Add(time.Second)
	if d, err = b.Allow(ctx, req); err != nil || d.Remaining != 1 {
		t.Errorf("Allow after recovery = %+v, %v, want 1 left", d, err)
	}
	s, _, _ := kv.Get(ctx, "e#k", Strong)
	if s.Tokens/TokenScale != 1 {
		t.Errorf("KV holds %d nanotokens, want one token", s.Tokens)
	}
	if st := b.Stats(); st.Errors != 2 {
		t.Errorf("Stats.Errors = %d, want 2", st.Errors)
	}

	// A refund whose write fails is kept and written with the next sync.
	if err := b.RefundAt(ctx, clk.Now(), edgelimit.Request{Key: "fresh"}); err != nil {
		t.Fatal(err)
	}
	b2 := mustNew(t, Config{Policy: kvPolicy("e", 3, 3, time.Hour, time.Second), KV: kv, Now: clk.Now, NoCache: true})
	spent, err := b2.Allow(ctx, req)
	if err != nil || !spent.Allowed {
		t.Fatalf("b2.Allow = %+v, %v, want allowed", spent, err)
	}
	kv.failPuts(errBroken)
	if err := b2.Refund(ctx, req, spent); !errors.Is(err, errBroken) {
		t.Errorf("Refund with a failing write = %v, want errBroken", err)
	}
	kv.putErr.Store(nil)
	// Without the refund the bucket holds less than a token.
	if d, err := b2.Allow(ctx, edgelimit.Request{Key: "k", Cost: 1}); err != nil || !d.Allowed {
		t.Errorf("Allow after a failed refund = %+v, %v, want the refund kept (allowed)", d, err)
	}
}

// TestBucketSurvivesGarbage: whatever a broken KV returns, the bucket
// answers in range and never panics.
func TestBucketSurvivesGarbage(t *testing.T) {
	clk := newClock(t0)
	rng := rand.New(rand.NewPCG(1, 2))
	values := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, t0.UnixNano(), TokenScale, 5 * TokenScale}
	kv := &faultKV{KV: NewMemory(MemoryConfig{Now: clk.Now}), corrupt: func() (State, bool) {
		return State{Tokens: values[rng.IntN(len(values))], At: values[rng.IntN(len(values))] + rng.Int64N(1e12) - 5e11}, rng.IntN(4) > 0
	}}
	for _, noCache := range []bool{false, true} {
		b := mustNew(t, Config{Policy: kvPolicy("g", 5, 5, time.Minute, time.Millisecond), KV: kv, Now: clk.Now, NoCache: noCache})
		last := map[string]edgelimit.Decision{}
		for i := range 3000 {
			clk.Add(time.Duration(rng.Int64N(int64(10 * time.Millisecond))))
			req := edgelimit.Request{Key: fmt.Sprint(i % 3), Cost: rng.Int64N(7) - 1}
			switch rng.IntN(6) {
			case 0:
				if err := b.Refund(ctx, req, last[req.Key]); err != nil {
					t.Fatal(err)
				}
				continue
			case 1:
				if err := b.RefundAt(ctx, clk.Now(), req); err != nil {
					t.Fatal(err)
				}
				continue
			case 2:
				d, err := b.Peek(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				checkInRange(t, "Peek", d, 5)
				continue
			}
			d, err := b.Allow(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			checkInRange(t, "Allow", d, 5)
			last[req.Key] = d
		}
	}
}

// checkInRange fails t unless d is a sane decision of a bucket of the given
// capacity (whose limit is its capacity): Remaining within [0, Limit], the
// durations not negative, and a denial's RetryAfter at least its Reset.
func checkInRange(t *testing.T, what string, d edgelimit.Decision, capacity int64) {
	t.Helper()
	if d.Limit != capacity || d.Remaining < 0 || d.Remaining > d.Limit || d.Reset < 0 || d.RetryAfter < 0 ||
		d.Allowed && d.RetryAfter != 0 || !d.Allowed && d.RetryAfter < d.Reset {
		t.Fatalf("%s = %+v, out of range", what, d)
	}
}

// TestBucketFirstSyncIsShared: requests for a key this process has never
// seen wait for the one read in flight instead of each reading; a waiter
// whose budget runs out gets an error.
func TestBucketFirstSyncIsShared(t *testing.T) {
	clk := newClock(t0)
	kv := &faultKV{KV: NewMemory(MemoryConfig{Now: clk.Now}), block: make(chan struct{}), started: make(chan struct{}, 1)}
	b := mustNew(t, Config{Policy: kvPolicy("w", 100, 100, time.Hour, time.Minute), KV: kv, Now: clk.Now})
	req := edgelimit.Request{Key: "k"}

	var wg sync.WaitGroup
	var admitted atomic.Int64
	wg.Go(func() {
		if d, err := b.Allow(ctx, req); err == nil && d.Allowed {
			admitted.Add(1)
		}
	})
	<-kv.started // the first sync is reading
	for range 8 {
		wg.Go(func() {
			if d, err := b.Allow(ctx, req); err == nil && d.Allowed {
				admitted.Add(1)
			}
		})
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Allow(short, req); !errors.Is(err, context.Canceled) {
		t.Errorf("Allow with an ended budget while waiting = %v, want context.Canceled", err)
	}
	close(kv.block)
	wg.Wait()
	if admitted.Load() != 9 || kv.gets.Load() != 1 {
		t.Errorf("admitted %d with %d reads, want 9 with 1", admitted.Load(), kv.gets.Load())
	}
}

// TestBucketSlowBucketKeepsItsState: a bucket that takes centuries to
// refill is stored with the longest TTL, not with an overflowed one.
// (Regression: ttl + 1s wrapped negative and the state was dropped.)
func TestBucketSlowBucketKeepsItsState(t *testing.T) {
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{Now: clk.Now})
	b := mustNew(t, Config{Policy: kvPolicy("slow", 1, MaxTokens, 3650*24*time.Hour, 0), KV: kv, Now: clk.Now, NoCache: true})
	if d, err := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: MaxTokens}); err != nil || !d.Allowed {
		t.Fatalf("Allow(everything) = %+v, %v", d, err)
	}
	if _, ok, _ := kv.Get(ctx, "slow#k", Strong); !ok {
		t.Fatal("the emptied bucket's state was not kept")
	}
	if d, err := b.Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || d.Allowed {
		t.Errorf("Allow after emptying = %+v, %v, want denied", d, err)
	}
}

// TestCacheHashCollisions: two keys with one 64-bit hash get two entries,
// found again whichever of them is evicted first.
func TestCacheHashCollisions(t *testing.T) {
	s := &newCache(4, Params{Capacity: 1, Limit: 1, Window: time.Second}).shards[0]
	n := t0.UnixNano()
	get := func(key string, h uint64, at int64) *entry {
		e, victim := s.lookup(key, h, at)
		if victim != nil {
			t.Fatalf("lookup(%q) chose a dirty victim among clean entries", key)
		}
		return e
	}
	a := get("a", 42, n)
	b := get("b", 42, n+1)
	if a == b || get("a", 42, n+2) != a || get("b", 42, n+3) != b || s.len() != 2 {
		t.Fatalf("colliding keys share or lose entries: a %p b %p len %d", a, b, s.len())
	}
	s.remove(a)
	if get("b", 42, n+4) != b {
		t.Error("b lost after a was removed")
	}
	if c := get("a", 42, n+5); c == a || c == b || s.len() != 2 {
		t.Errorf("a came back as %p (a %p b %p), len %d", c, a, b, s.len())
	}
	for range 3 {
		get(fmt.Sprint("x", s.len()), uint64(100+s.len()), n+6)
	}
	if s.len() > 4 {
		t.Errorf("len %d beyond the bound 4", s.len())
	}
}

// Local is the Bucket's in-process twin for on_store_error: local: the same
// policy and clock on a KV of its own, so it decides without the shared KV
// and does not share its state.
func TestBucketLocal(t *testing.T) {
	clk := newClock(t0)
	shared := NewMemory(MemoryConfig{Now: clk.Now})
	b := mustNew(t, Config{Policy: kvPolicy("twin", 2, 2, time.Minute, time.Second), KV: shared, Now: clk.Now})
	for range 2 {
		if d, err := b.Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || !d.Allowed {
			t.Fatalf("shared bucket: %+v, %v", d, err)
		}
	}
	twin, err := b.Local()
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for range 3 {
		d, err := twin.Allow(ctx, edgelimit.Request{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Allowed)
	}
	if want := []bool{true, true, false}; !slices.Equal(got, want) {
		t.Errorf("twin decisions = %v, want %v (its own full bucket of 2)", got, want)
	}
	if shared.Len() != 1 {
		t.Errorf("shared KV holds %d keys, want 1: the twin must not write to it", shared.Len())
	}
}
