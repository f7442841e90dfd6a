package kvbucket

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit"
)

// replicated is a table over regions in one process, as a DynamoDB Global
// Table is over AWS regions: each region has its own replica (a Memory);
// every write lands in the writer's replica, and reaches the others' a
// fixed lag later, replacing whatever item they hold (last writer wins per
// item). bench's kv part runs the same with two dynalite servers and
// internal/tools/replicator.
type replicated struct {
	lag      time.Duration
	replicas map[string]*Memory
	mu       sync.Mutex
	log      []replication
}

type replication struct {
	at        int64
	from, key string
}

func newReplicated(lag time.Duration, now func() time.Time, regions ...string) *replicated {
	r := &replicated{lag: lag, replicas: map[string]*Memory{}}
	for _, name := range regions {
		r.replicas[name] = NewMemory(MemoryConfig{Now: now})
	}
	return r
}

// replicate copies every write older than the lag at n to the other
// replicas.
func (r *replicated) replicate(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := 0
	for ; i < len(r.log) && r.log[i].at <= n-int64(r.lag); i++ {
		w := r.log[i]
		src := r.replicas[w.from]
		src.mu.Lock()
		it := src.m[w.key]
		var p wire.Part
		var exp int64
		if it != nil {
			p, exp = clonePart(it.p), it.expires
		}
		src.mu.Unlock()
		if it == nil {
			continue
		}
		for name, dst := range r.replicas {
			if name != w.from {
				dst.putPart(w.key, p, exp)
			}
		}
	}
	r.log = r.log[i:]
}

// putPart stores p under key as replication does: the whole item, last
// writer wins.
func (m *Memory) putPart(key string, p wire.Part, expires int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.m[key]
	if it == nil {
		it = &memItem{key: key}
		m.m[key] = it
		it.next, it.prev = m.lru.next, &m.lru
		it.next.prev, m.lru.next = it, it
	}
	it.p, it.expires = p, expires
}

// replicaKV is one region's KV over a replicated table, with the item
// layout of dynamostore.Config.Regions: its own part "key@region", the others'
// read from its replica.
type replicaKV struct {
	t      *replicated
	self   string
	others []string
	now    func() time.Time
}

func (k *replicaKV) parts(ctx context.Context, key string) ([]wire.Part, error) {
	var out []wire.Part
	for _, o := range k.others {
		t, err := k.t.replicas[k.self].get(ctx, key+"@"+o, wire.Eventual)
		if err != nil {
			return nil, err
		}
		out = append(out, t.Own)
	}
	return out, nil
}

func (k *replicaKV) get(ctx context.Context, key string, c wire.Consistency) (wire.Tally, error) {
	t, err := k.t.replicas[k.self].get(ctx, key+"@"+k.self, c)
	if err != nil {
		return wire.Tally{}, err
	}
	t.Others, err = k.parts(ctx, key)
	return t, err
}

func (k *replicaKV) update(ctx context.Context, key string, u wire.Update) (wire.Tally, error) {
	t, err := k.t.replicas[k.self].update(ctx, key+"@"+k.self, u)
	if err != nil {
		return wire.Tally{}, err
	}
	if t.Applied {
		k.t.mu.Lock()
		k.t.log = append(k.t.log, replication{at: k.now().UnixNano(), from: k.self, key: key + "@" + k.self})
		k.t.mu.Unlock()
	}
	t.Others, err = k.parts(ctx, key)
	return t, err
}

// regionBound is the package documentation's bound over R regions: each
// region's own excess E, and for each other region what it can spend in
// a replication lag and a sync interval, B + r·(δ + S).
func regionBound(sc scenario, regions int, lag, t time.Duration) int64 {
	r := float64(sc.limit) / sc.window.Seconds()
	perRegion := sc
	perRegion.instances = sc.instances / regions
	e := float64(boundFor(perRegion, 0)) - float64(sc.capacity)
	b := float64(sc.capacity) + r*t.Seconds() + float64(regions)*e +
		float64(regions-1)*(float64(sc.capacity)+r*(lag+sc.sync).Seconds())
	return int64(b)
}

// TestRegionsOverAdmission: two regions of two instances each, under the
// steady load of 100 requests a second for 30s (burst 8, 8 a minute), with
// 1s and 5s of replication lag. Each region's spending stays in its own
// item, so replication (last writer wins per item) never replaces one
// region's spending with the other's: the regions over-admit only what
// the other spends within a lag, once, never a multiple of the rate.
func TestRegionsOverAdmission(t *testing.T) {
	sc := scenario{name: "regions", capacity: 8, limit: 8, window: time.Minute, sync: time.Second, instances: 4, perInstance: 750, gap: 40 * time.Millisecond}
	var rows []string
	for _, lag := range []time.Duration{time.Second, 5 * time.Second} {
		clk := newClock(t0)
		table := newReplicated(lag, clk.Now, "a", "b")
		pol := kvPolicy("regions", sc.limit, sc.capacity, sc.window, sc.sync)
		var buckets []*Bucket
		for i := range sc.instances {
			self, other := "a", "b"
			if i%2 == 1 {
				self, other = "b", "a"
			}
			buckets = append(buckets, mustNew(t, Config{Policy: pol, KV: &replicaKV{t: table, self: self, others: []string{other}, now: clk.Now}, Now: clk.Now}))
		}
		start := clk.Now()
		gap := sc.gap / time.Duration(sc.instances)
		var admitted, failed atomic.Int64
		var wg sync.WaitGroup
		for _, b := range buckets {
			wg.Go(func() {
				for range sc.perInstance {
					at := clk.Tick(gap)
					table.replicate(at.UnixNano())
					d, err := b.AllowAt(ctx, at, edgelimit.Request{Key: "one-key"})
					switch {
					case err != nil:
						failed.Add(1)
					case d.Allowed:
						admitted.Add(1)
					}
					runtime.Gosched()
				}
			})
		}
		wg.Wait()
		span := clk.Now().Sub(start)
		perfect := Params{Capacity: sc.capacity, Limit: sc.limit, Window: sc.window}
		ps, ideal := perfect.Full(start), int64(0)
		for k := range sc.instances * sc.perInstance {
			var d edgelimit.Decision
			if ps, d = perfect.TakeAt(ps, start.Add(time.Duration(k+1)*gap), 1); d.Allowed {
				ideal++
			}
		}
		bound := regionBound(sc, 2, lag, span)
		rows = append(rows, fmt.Sprintf("| %s | %d | %d | %d | %.2f× | %d |", lag, sc.instances*sc.perInstance, ideal, admitted.Load(), float64(admitted.Load())/float64(ideal), bound))
		if failed.Load() != 0 {
			t.Errorf("lag %s: %d decisions failed", lag, failed.Load())
		}
		if admitted.Load() > bound {
			t.Errorf("lag %s: admitted %d, beyond the bound %d", lag, admitted.Load(), bound)
		}
		// Without the region's parts summed the two regions would be two
		// buckets: at least 2·⌊B + r·T⌋. They must stay well below.
		if two := 2 * (sc.capacity + int64(float64(sc.limit)*span.Seconds()/sc.window.Seconds())); admitted.Load() >= two {
			t.Errorf("lag %s: admitted %d, as much as two separate buckets (%d)", lag, admitted.Load(), two)
		}
	}
	t.Logf("two regions, 2 instances each (goroutine model):\n| lag | requests | ideal | admitted | × ideal | bound |\n|---|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
}
