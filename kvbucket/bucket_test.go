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

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
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
func kvPolicy(name string, limit, burst int64, window, sync time.Duration) *policy.Policy {
	return &policy.Policy{
		Name: name, Strategy: Strategy,
		Limit: limit, Window: window, Cost: 1,
		OnStoreError: policy.FailOpen, StoreTimeout: 100 * time.Millisecond,
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
		for _, tc := range bucketTables() {
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
		{"durable policy", Config{Policy: &policy.Policy{Name: "d", Strategy: &policy.Strategy{Name: "durable"}, Limit: 1, Window: time.Second}, KV: kv}, "not kv"},
		{"another strategy's options", Config{Policy: &policy.Policy{Name: "g", Limit: 1, Window: time.Second, Options: struct{}{}}, KV: kv}, "not *kvbucket.Options"},
		{"no window", Config{Policy: kvPolicy("p", 1, 1, 0, 0), KV: kv}, "window"},
		{"closed without window", Config{Policy: kvPolicy("p", 0, 0, 0, 0), KV: kv}, "window"},
		{"huge limit", Config{Policy: kvPolicy("p", MaxTokens+1, 1, time.Second, 0), KV: kv}, "limit"},
		{"cost above capacity", Config{Policy: &policy.Policy{Name: "c", Limit: 10, Cost: 7, Window: time.Second}, Options: &Options{Burst: 5}, KV: kv}, "cost 7"},
		{"negative sync", Config{Policy: kvPolicy("p", 1, 1, time.Second, -1), KV: kv}, "sync interval"},
		{"negative cache", Config{Policy: good, KV: kv, CacheSize: -1}, "cache size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New() = %v, want ErrConfig mentioning %q", err, tc.want)
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

// tokensIn returns the whole tokens key's bucket holds in kv at n, as a
// fresh reader of the KV (another instance) would see them.
func tokensIn(t *testing.T, kv KV, b *Bucket, key string, n time.Time) int64 {
	t.Helper()
	tally, err := kv.get(ctx, b.prefix+key, wire.Strong)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	var v view
	v.own = tally.Own
	v.setOthers(&b.u, tally.Others)
	a := b.u.avail(v.tat(&b.u), n.UnixNano())
	if a.Sign() <= 0 {
		return 0
	}
	return a.Div(b.u.w, false)
}

// TestBucketCachedSkipsKV: during its first sync interval in an instance
// a key's admissions are written through (the instance cannot know yet
// who else spends it); after it, a hot key is decided locally between
// syncs, and each sync is one write and no read.
func TestBucketCachedSkipsKV(t *testing.T) {
	clk := newClock(t0)
	kv := &faultKV{KV: NewMemory(MemoryConfig{Now: clk.Now})}
	b := mustNew(t, Config{Policy: kvPolicy("hot", 100, 100, time.Minute, time.Second), KV: kv, Now: clk.Now})
	req := edgelimit.Request{Key: "k"}
	steps := []struct {
		at            time.Duration
		gets, updates int64
	}{
		{0, 1, 1},                       // first read (strong), then a conditional write
		{100 * time.Millisecond, 1, 2},  // probation: written through
		{999 * time.Millisecond, 1, 3},  // probation
		{time.Second, 1, 4},             // the first sync: one write, grants the share
		{1500 * time.Millisecond, 1, 4}, // local
		{2 * time.Second, 1, 5},         // sync
		{2500 * time.Millisecond, 1, 5}, // local
	}
	for _, st := range steps {
		clk.Set(t0.Add(st.at))
		if d, err := b.Allow(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("at t0+%s: %+v, %v", st.at, d, err)
		}
		if g, u := kv.gets.Load(), kv.updates.Load(); g != st.gets || u != st.updates {
			t.Errorf("after t0+%s: %d gets, %d updates, want %d, %d", st.at, g, u, st.gets, st.updates)
		}
	}
	if got := tokensIn(t, kv, b, "k", clk.Now()); got != 98 {
		t.Errorf("KV holds %d whole tokens, want 98 (100 - 6 written + 4.17 refilled in 2.5s; the last spend is local)", got)
	}
	st := b.Stats()
	if st.Local != 2 || st.Synced != 6 || st.Reads != 1 || st.Writes != 5 || st.Errors != 0 || st.Keys != 1 {
		t.Errorf("Stats = %+v", st)
	}
}

// TestBucketInstancesMerge pins issue #14's "merge instead of overwrite":
// two instances sharing a KV add their spending up in it instead of the
// last writer's copy replacing the other's. Before, B wrote its own copy
// (read before A's local spends were written), and A's spending that B's
// copy lacked was lost from the KV.
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
	allow(a, "A", 9) // first sync interval: written through
	allow(a, "A", 8)
	allow(b, "B", 7) // B's first: sees A's two
	clk.Add(time.Second)
	// A's sync: one write. A and B both wrote this key, so A's share of
	// the 6 left is 3: Remaining counts in it.
	allow(a, "A", 3)
	allow(a, "A", 2) // local, from A's share
	allow(a, "A", 1)
	allow(a, "A", 0)
	if d, _ := a.Allow(ctx, req); d.Allowed {
		t.Errorf("A's fourth local spend = %+v, want denied: its share is 3 of the 6 left", d)
	}
	// B's sync: 5 left as far as the KV knows (A's three local spends are
	// not written yet); B's share is 2.5.
	allow(b, "B", 2)
	clk.Add(time.Second)
	// A's sync writes its three: every spend of both is in the KV, none
	// replaced another.
	allow(a, "A", 0)
	if got := tokensIn(t, kv, a, "k", clk.Now()); got != 1 {
		t.Errorf("KV holds %d tokens, want 1 (10 - 9 spent, every one of them)", got)
	}
}

// TestShareArithmetic pins the allowance at fixed instants: after a sync
// that finds n instances writing the key, each may spend locally
// (R + r·(t − sync)) / n, R being what the bucket held then; beyond it a
// request is denied until the share grows or the next sync, with Reset and
// RetryAfter counted in the share.
func TestShareArithmetic(t *testing.T) {
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{Now: clk.Now})
	// 10 a second, burst 20; syncs every 2s.
	pol := kvPolicy("share", 10, 20, time.Second, 2*time.Second)
	inst := make([]*Bucket, 4)
	for i := range inst {
		inst[i] = mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
	}
	req := edgelimit.Request{Key: "k"}
	for _, b := range inst { // each writes once: 4 instances in this epoch
		if d, _ := b.Allow(ctx, req); !d.Allowed {
			t.Fatal("first spends denied")
		}
	}
	// 2s later the bucket is full again (16 + 20 refilled, capped at 20).
	clk.Add(2 * time.Second)
	a := inst[0]
	d, _ := a.Allow(ctx, req) // sync: spends 1, 19 left, 4 instances: a share of 19/4 = 4.75
	if !d.Allowed || d.Remaining != 4 {
		t.Fatalf("sync = %+v, want allowed with 4 left (the share: 19/4 less the 0 spent since)", d)
	}
	if a.cacheEntry("k").insts != 4 {
		t.Fatalf("instances = %d, want 4", a.cacheEntry("k").insts)
	}
	for i := range 4 {
		if d, _ = a.Allow(ctx, req); !d.Allowed || d.Remaining != int64(3-i) {
			t.Fatalf("local spend %d = %+v, want allowed with %d left", i+1, d, 3-i)
		}
	}
	// 4 spent of 4.75: the fifth needs 0.25 more, which the share gains in
	// 0.25·4/10 s = 100ms; the next whole token of the share is the same.
	d, _ = a.Allow(ctx, req)
	if d.Allowed || d.Remaining != 0 || d.Reset != 100*time.Millisecond || d.RetryAfter != 100*time.Millisecond {
		t.Errorf("beyond the share = %+v, want denied, 0 left, Reset and RetryAfter 100ms", d)
	}
	clk.Add(100 * time.Millisecond)
	if d, _ = a.Allow(ctx, req); !d.Allowed {
		t.Errorf("100ms later = %+v, want allowed (the share grew by 0.25)", d)
	}
	// A cost of 3 at 200ms needs (5+3)·4 − (19+2) = 11 tokens more of the
	// bucket's refill (shared by 4): 1.1s, before the next sync (1.8s).
	clk.Add(100 * time.Millisecond)
	if d, _ = a.Allow(ctx, edgelimit.Request{Key: "k", Cost: 3}); d.Allowed || d.RetryAfter != 1100*time.Millisecond || d.Reset != 300*time.Millisecond {
		t.Errorf("cost 3 = %+v, want denied, RetryAfter 1.1s, Reset 300ms", d)
	}
	// The other three spend nothing: at the next sync the share is renewed
	// from what the KV holds.
	clk.Add(1800 * time.Millisecond)
	if d, _ = a.Allow(ctx, req); !d.Allowed {
		t.Errorf("after the next sync = %+v, want allowed", d)
	}
}

// cacheEntry returns key's entry (nil if none).
func (b *Bucket) cacheEntry(key string) *entry {
	s, h := b.cache.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.find(key, h)
}

// TestBucketAloneIsExact: an instance that is the only writer of a key
// decides from the whole bucket, refill included, between syncs: exactly
// a token bucket, with one write per sync interval.
func TestBucketAloneIsExact(t *testing.T) {
	clk := newClock(t0)
	kv := &faultKV{KV: NewMemory(MemoryConfig{Now: clk.Now})}
	pol := kvPolicy("alone", 5, 5, time.Second, time.Second) // a token every 200ms
	b := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
	perfect := Params{Capacity: 5, Limit: 5, Window: time.Second}
	ps := perfect.Full(t0)
	for i := range 200 { // 10s, every 50ms
		at := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		clk.Set(at)
		d, err := b.Allow(ctx, edgelimit.Request{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		var want edgelimit.Decision
		ps, want = perfect.TakeAt(ps, at, 1)
		if d.Allowed != want.Allowed || d.Remaining != want.Remaining {
			t.Fatalf("at t0+%s: allowed %v remaining %d, want %v %d", at.Sub(t0), d.Allowed, d.Remaining, want.Allowed, want.Remaining)
		}
	}
	// 1 read, the first interval's writes (its 5 admissions, then denials
	// from the local state), then at most one write a second.
	if g, u := kv.gets.Load(), kv.updates.Load(); g != 1 || u > 10+9 {
		t.Errorf("%d gets, %d updates in 10s, want 1 and at most 19 (10 admissions in the first second, then one a second)", g, u)
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
			if d, err := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: 1}); err != nil || d.Allowed {
				t.Fatalf("Allow = %+v, %v, want denied", d, err)
			}
			if got := tokensIn(t, kv, b, "k", clk.Now()); got != 0 {
				t.Errorf("KV holds %d tokens, want less than one", got)
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

// TestMemoryUpdateSemantics: the memory KV applies an Update as DynamoDB
// does (see the conformance test TestKVUpdateSemantics for both).
func TestMemoryExpiresAndBounds(t *testing.T) {
	clk := newClock(t0)
	m := NewMemory(MemoryConfig{MaxKeys: 2, Now: clk.Now})
	put := func(k string, ttl time.Duration) {
		t.Helper()
		if _, err := m.update(ctx, k, wire.Update{Add: wire.WideOf(5), Spent: 1, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(k string) bool {
		t.Helper()
		tl, err := m.get(ctx, k, wire.Eventual)
		if err != nil {
			t.Fatalf("Get(%q) = %+v, %v", k, tl, err)
		}
		return tl.Own.Has
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
	put("d", math.MaxInt64)
	clk.Add(100 * 365 * 24 * time.Hour)
	if !get("d") {
		t.Error("d with the longest ttl expired")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.get(cctx, "d", wire.Eventual); !errors.Is(err, context.Canceled) {
		t.Errorf("Get(canceled) = %v, want context.Canceled", err)
	}
	if _, err := m.update(cctx, "d", wire.Update{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Update(canceled) = %v, want context.Canceled", err)
	}
}

// faultKV wraps a KV, counts calls, and fails, blocks or corrupts on demand.
type faultKV struct {
	KV
	calls, gets, updates atomic.Int64
	getErr, updErr       atomic.Pointer[error]
	// updKey, if set, limits updErr to Updates of that key.
	updKey atomic.Pointer[string]
	// corrupt, if set, replaces what Get and Update return.
	corrupt func() wire.Tally
	// block, if set, is waited on by Get, which first sends on started
	// (if set and not full).
	block   chan struct{}
	started chan struct{}
}

func (f *faultKV) get(ctx context.Context, key string, c wire.Consistency) (wire.Tally, error) {
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
			return wire.Tally{}, fmt.Errorf("kvbucket: fake get %q: %w", key, ctx.Err())
		}
	}
	if e := f.getErr.Load(); e != nil {
		return wire.Tally{}, *e
	}
	if f.corrupt != nil {
		return f.corrupt(), nil
	}
	return f.KV.get(ctx, key, c)
}

func (f *faultKV) update(ctx context.Context, key string, u wire.Update) (wire.Tally, error) {
	f.calls.Add(1)
	f.updates.Add(1)
	if e := f.updErr.Load(); e != nil {
		if k := f.updKey.Load(); k == nil || *k == key {
			return wire.Tally{}, *e
		}
	}
	t, err := f.KV.update(ctx, key, u)
	if err == nil && f.corrupt != nil {
		c := f.corrupt()
		c.Applied = t.Applied
		return c, nil
	}
	return t, err
}

func (f *faultKV) failGets(err error)    { f.getErr.Store(&err) }
func (f *faultKV) failUpdates(err error) { f.updKey.Store(nil); f.updErr.Store(&err) }

func (f *faultKV) failUpdatesOf(key string, err error) { f.updKey.Store(&key); f.updErr.Store(&err) }

var errBroken = errors.New("kvbucket: test KV is broken")

// TestBucketKVErrors: a failing KV yields an error and spends nothing; a
// known key is then decided locally until its next sync is due, so a
// broken KV costs one error per key per sync interval.
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
	kv.failUpdates(errBroken)
	if _, err := b.Allow(ctx, req); !errors.Is(err, errBroken) {
		t.Fatalf("Allow with a failing write = %v, want errBroken", err)
	}
	// The failed write was the attempt of this interval: decided locally,
	// and neither failed call spent anything.
	calls := kv.calls.Load()
	for i, want := range []int64{2, 1} {
		d, err := b.Allow(ctx, req)
		if err != nil || !d.Allowed || d.Remaining != want {
			t.Errorf("Allow #%d after the failures = %+v, %v, want allowed with %d left", i+1, d, err, want)
		}
	}
	if kv.calls.Load() != calls {
		t.Errorf("a local decision called the KV")
	}
	kv.updErr.Store(nil)
	clk.Add(time.Second)
	if d, err := b.Allow(ctx, req); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("Allow after recovery = %+v, %v, want allowed with 0 left", d, err)
	}
	if got := tokensIn(t, kv, b, "k", clk.Now()); got != 0 {
		t.Errorf("KV holds %d tokens, want 0: the local spends were written with the sync", got)
	}
	if st := b.Stats(); st.Errors != 2 {
		t.Errorf("Stats.Errors = %d, want 2", st.Errors)
	}

	// A refund whose write fails is kept and written with the next sync.
	b2 := mustNew(t, Config{Policy: kvPolicy("e2", 3, 3, time.Hour, time.Second), KV: kv, Now: clk.Now, NoCache: true})
	var spent edgelimit.Decision
	for range 3 {
		var err error
		if spent, err = b2.Allow(ctx, req); err != nil || !spent.Allowed {
			t.Fatalf("b2.Allow = %+v, %v, want allowed", spent, err)
		}
	}
	kv.failUpdates(errBroken)
	if err := b2.Refund(ctx, req, spent); !errors.Is(err, errBroken) {
		t.Errorf("Refund with a failing write = %v, want errBroken", err)
	}
	kv.updErr.Store(nil)
	// Without the refund the bucket holds less than a token.
	if d, err := b2.Allow(ctx, edgelimit.Request{Key: "k", Cost: 1}); err != nil || !d.Allowed {
		t.Errorf("Allow after a failed refund = %+v, %v, want the refund kept (allowed)", d, err)
	}
	if got := tokensIn(t, kv, b2, "k", clk.Now()); got != 0 {
		t.Errorf("KV holds %d tokens for b2, want 0", got)
	}
}

// TestBucketSurvivesGarbage: whatever a broken KV returns, the bucket
// answers in range and never panics.
func TestBucketSurvivesGarbage(t *testing.T) {
	clk := newClock(t0)
	rng := rand.New(rand.NewPCG(1, 2))
	values := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, t0.UnixNano(), TokenScale, 5 * TokenScale}
	wide := func() wire.Wide {
		switch rng.IntN(4) {
		case 0:
			return wire.Mul(values[rng.IntN(len(values))], values[rng.IntN(len(values))])
		case 1:
			return wire.Mul(t0.UnixNano()+rng.Int64N(1e12)-5e11, 5)
		}
		return wire.WideOf(values[rng.IntN(len(values))] + rng.Int64N(1e12) - 5e11)
	}
	part := func() wire.Part {
		p := wire.Part{Has: rng.IntN(4) > 0, TAT: wide(), Spent: values[rng.IntN(len(values))]}
		for range rng.IntN(3) {
			p.Writers = append(p.Writers, wire.Writer{Epoch: values[rng.IntN(len(values))] / int64(time.Millisecond), ID: rng.Uint32()})
		}
		return p
	}
	kv := &faultKV{KV: NewMemory(MemoryConfig{Now: clk.Now}), corrupt: func() wire.Tally {
		t := wire.Tally{Own: part()}
		for range rng.IntN(3) {
			t.Others = append(t.Others, part())
		}
		return t
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
	if tl, _ := kv.get(ctx, "slow#k", wire.Strong); !tl.Own.Has {
		t.Fatal("the emptied bucket's state was not kept")
	}
	if d, err := b.Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || d.Allowed {
		t.Errorf("Allow after emptying = %+v, %v, want denied", d, err)
	}
}

// TestCacheHashCollisions: two keys with one 64-bit hash get two entries,
// found again whichever of them is evicted first.
func TestCacheHashCollisions(t *testing.T) {
	u := newUnits(Params{Capacity: 1, Limit: 1, Window: time.Second})
	s := &newCache(4, &u, "").shards[0]
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
