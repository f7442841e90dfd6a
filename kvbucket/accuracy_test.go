package kvbucket

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// The over-admission measurement: N concurrent clients hammer one key.
// Each client is its own Lambda instance (its own Bucket, so its own
// cache) unless the run is "one instance", where all N share one Bucket.
// Time is a shared fake clock that advances gap/N per request, so every
// client sends about one request per gap and a run lasts perClient × gap
// of bucket time, whatever N is.
type scenario struct {
	name      string
	capacity  int64 // B
	limit     int64 // refilled per window
	window    time.Duration
	sync      time.Duration // S
	perClient int
	gap       time.Duration
	clients   []int
	oneInst   bool // also run all clients on one instance
}

var (
	// burst: a bucket of 8 that barely refills; every client sends 10.
	burst = scenario{name: "burst", capacity: 8, limit: 8, window: time.Hour, sync: 100 * time.Millisecond,
		perClient: 10, gap: 20 * time.Millisecond, clients: []int{1, 8, 64}, oneInst: true}
	// sustained: 10 per second for 4 seconds, every client at 25 per
	// second, syncing every half second.
	sustained = scenario{name: "sustained", capacity: 10, limit: 10, window: time.Second, sync: 500 * time.Millisecond,
		perClient: 100, gap: 40 * time.Millisecond, clients: []int{1, 8}}
)

type accRun struct {
	clients int
	oneInst bool
	noCache bool
}

type accResult struct {
	accRun
	requests  int
	instances int
	admitted  int64
	errors    int64
	ideal     int64 // what one perfect bucket admits: min(requests, ⌊B + r·T⌋)
	bound     int64 // the documented bound: min(requests, C·⌊B + r·T⌋)
	stats     Stats // summed over the instances
}

func (r accResult) row(store string, sc scenario) string {
	inst := fmt.Sprint(r.instances)
	if r.oneInst {
		inst = "1 (shared)"
	}
	mode := "cached"
	if r.noCache {
		mode = "uncached"
	}
	return fmt.Sprintf("| %s | %s | %d | %s | %s | %d | %d | %d | %+d | %d | %d/%d |",
		sc.name, store, r.clients, inst, mode, r.requests, r.ideal, r.admitted, r.admitted-r.ideal, r.bound,
		r.stats.Synced, r.stats.Synced+r.stats.Local)
}

func runAccuracy(t *testing.T, kv KV, clk *clock, name string, sc scenario, run accRun) accResult {
	t.Helper()
	instances := run.clients
	if run.oneInst {
		instances = 1
	}
	pol := kvPolicy(name, sc.limit, sc.capacity, sc.window, sc.sync)
	buckets := make([]*Bucket, instances)
	for i := range buckets {
		buckets[i] = mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now, NoCache: run.noCache})
	}
	start := clk.Now()
	gap := sc.gap / time.Duration(run.clients)
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for c := range run.clients {
		b := buckets[c%instances]
		wg.Go(func() {
			<-ready
			for range sc.perClient {
				d, err := b.AllowAt(ctx, clk.Tick(gap), edgelimit.Request{Key: "one-key"})
				switch {
				case err != nil:
					failed.Add(1)
				case d.Allowed:
					admitted.Add(1)
				}
				runtime.Gosched() // let the other clients interleave

			}
		})
	}
	close(ready)
	wg.Wait()
	res := accResult{accRun: run, instances: instances, admitted: admitted.Load(), errors: failed.Load()}
	res.requests = run.clients * sc.perClient
	// The perfect bucket decides the same requests, at the same instants,
	// one after the other.
	perfect := Params{Capacity: sc.capacity, Limit: sc.limit, Window: sc.window}
	ps := perfect.Full(start)
	for k := 1; k <= res.requests; k++ {
		var d edgelimit.Decision
		if ps, d = perfect.TakeAt(ps, start.Add(time.Duration(k)*gap), 1); d.Allowed {
			res.ideal++
		}
	}
	// ⌊B + r·T⌋: what one instance's private bucket can admit in the run.
	perInstance := sc.capacity + int64(perfect.gain(uint64(clk.Now().Sub(start)))/TokenScale)
	res.bound = min(int64(res.requests), int64(instances)*perInstance)
	for _, b := range buckets {
		s := b.Stats()
		res.stats.Local += s.Local
		res.stats.Synced += s.Synced
	}
	return res
}

func (sc scenario) runs() []accRun {
	var runs []accRun
	for _, noCache := range []bool{true, false} {
		for _, n := range sc.clients {
			runs = append(runs, accRun{clients: n, noCache: noCache})
			if n > 1 && sc.oneInst {
				runs = append(runs, accRun{clients: n, oneInst: true, noCache: noCache})
			}
		}
	}
	return runs
}

// checkAccuracy asserts the documented bound. One instance, whatever the
// number of its concurrent clients, admits exactly what a perfect bucket
// admits. C instances admit at most what C perfect buckets would,
// C·⌊B + r·T⌋, and at least what one would, less the refill of one sync
// interval per instance (a contended instance spends new tokens only from
// its next sync on).
func checkAccuracy(t *testing.T, store string, sc scenario, r accResult) {
	t.Helper()
	if r.errors != 0 {
		t.Errorf("%s %s: %d decisions failed", sc.name, store, r.errors)
	}
	lo, hi := r.ideal, r.ideal
	if r.instances > 1 {
		lo -= int64(r.instances) * (sc.limit*int64(sc.sync)/int64(sc.window) + 1)
		hi = r.bound
	}
	if r.admitted < lo || r.admitted > hi {
		t.Errorf("%s %s %+v: %d instances admitted %d, want between %d and %d",
			sc.name, store, r.accRun, r.instances, r.admitted, lo, hi)
	}
}

const accHeader = "| scenario | store | clients N | instances C | mode | requests | perfect bucket | admitted | over | bound C·⌊B+r·T⌋ | KV reads/decisions |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|"

func measure(t *testing.T, store string, scenarios []scenario, newKV func(now func() time.Time) KV) {
	var rows []string
	for _, sc := range scenarios {
		for i, run := range sc.runs() {
			clk := newClock(t0)
			r := runAccuracy(t, newKV(clk.Now), clk, fmt.Sprintf("%s%d", sc.name, i), sc, run)
			checkAccuracy(t, store, sc, r)
			rows = append(rows, r.row(store, sc))
		}
	}
	t.Logf("over-admission:\n%s\n%s", accHeader, strings.Join(rows, "\n"))
}

func TestOverAdmissionMemory(t *testing.T) {
	measure(t, "memory", []scenario{burst, sustained}, func(now func() time.Time) KV { return NewMemory(MemoryConfig{Now: now}) })
}

// TestOverAdmissionServers measures on both servers at once (each is a
// single process; the runs are bounded: about 2,000 calls on moto). The
// sustained scenario runs on dynalite only: on moto it would take longer
// than the rest of the package's tests together.
func TestOverAdmissionServers(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		t.Parallel()
		scenarios := []scenario{burst, sustained}
		if srv.Name == "moto" {
			scenarios = scenarios[:1]
		}
		var kv *DynamoDB
		measure(t, srv.Name, scenarios, func(now func() time.Time) KV {
			if kv == nil {
				kv, _, _, _ = dynamoKV(t, srv, now)
			}
			kv.now = now
			return kv
		})
	})
}
