package kvbucket_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/policy"
)

// A contact form: 3 messages per minute per client, bursts of up to 3.
// The clock is fixed so that the output is deterministic. Reset is the
// effective window (RateLimit's t): a token comes back every 20s.
func ExampleNew() {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	clock := func() time.Time { return now }

	pol := &policy.Policy{Name: "contact", Limit: 3, Window: time.Minute, Cost: 1}
	bucket, err := kvbucket.New(kvbucket.Config{
		Policy: pol,
		KV:     kvbucket.NewMemory(kvbucket.MemoryConfig{Now: clock}),
		Now:    clock,
	})
	if err != nil {
		log.Fatal(err)
	}
	req := edgelimit.Request{Key: "hashed-client-key", Cost: pol.Cost}
	for _, at := range []time.Duration{0, 0, 0, 0, 20 * time.Second} {
		now = t0.Add(at)
		d, err := bucket.Allow(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("t0+%-3s allowed=%-5v remaining=%d reset=%-3s retry-after=%s\n", at, d.Allowed, d.Remaining, d.Reset, d.RetryAfter)
	}
	// Output:
	// t0+0s  allowed=true  remaining=2 reset=20s retry-after=0s
	// t0+0s  allowed=true  remaining=1 reset=20s retry-after=0s
	// t0+0s  allowed=true  remaining=0 reset=20s retry-after=0s
	// t0+0s  allowed=false remaining=0 reset=20s retry-after=20s
	// t0+20s allowed=true  remaining=0 reset=20s retry-after=0s
}

// Two Lambda instances are two Buckets sharing a KV. Their spending adds
// up in the KV instead of one instance's copy replacing the other's: in its
// first sync interval an instance reserves each admission in the KV; after
// it, it decides a hot key locally from its share of what the bucket held
// at its last sync (here half: two instances write this key), and writes
// what it spent once per sync interval.
func ExampleBucket_AllowAt() {
	t0 := time.Unix(1_700_000_000, 0)
	kv := kvbucket.NewMemory(kvbucket.MemoryConfig{Now: func() time.Time { return t0 }})
	pol := &policy.Policy{Name: "search", Limit: 10, Window: time.Hour, Options: &kvbucket.Options{SyncInterval: time.Second}}
	a, _ := kvbucket.New(kvbucket.Config{Policy: pol, KV: kv})
	b, _ := kvbucket.New(kvbucket.Config{Policy: pol, KV: kv})
	ctx, req := context.Background(), edgelimit.Request{Key: "k"}

	show := func(name string, l *kvbucket.Bucket, at time.Duration) {
		d, _ := l.AllowAt(ctx, t0.Add(at), req)
		fmt.Printf("%s at t0+%s: allowed %v, remaining %d\n", name, at, d.Allowed, d.Remaining)
	}
	show("A", a, 0)                     // reads the KV (empty: full), reserves one in it
	show("A", a, 0)                     // first interval: reserved in the KV
	show("B", b, 0)                     // B's first: sees A's two
	show("B", b, 500*time.Millisecond)  // B's first interval
	show("A", a, time.Second)           // A's sync: 5 left in the KV, A's share of them 2.5
	show("A", a, time.Second)           // local, from the share
	show("A", a, time.Second)           // local
	show("A", a, time.Second)           // A's share is spent
	show("B", b, 1500*time.Millisecond) // B's sync: A's two local spends are not written yet
	show("A", a, 2*time.Second)         // A's sync writes them: 9 spent in the KV, 1 left, A's share 0.5
	// Output:
	// A at t0+0s: allowed true, remaining 9
	// A at t0+0s: allowed true, remaining 8
	// B at t0+0s: allowed true, remaining 7
	// B at t0+500ms: allowed true, remaining 6
	// A at t0+1s: allowed true, remaining 2
	// A at t0+1s: allowed true, remaining 1
	// A at t0+1s: allowed true, remaining 0
	// A at t0+1s: allowed false, remaining 0
	// B at t0+1.5s: allowed true, remaining 2
	// A at t0+2s: allowed true, remaining 0
}

// The pure algorithm: no clock, no storage.
func ExampleParams_TakeAt() {
	t0 := time.Unix(1_700_000_000, 0)
	p := kvbucket.Params{Capacity: 2, Limit: 1, Window: time.Second}
	s := p.Full(t0)
	for _, step := range []struct {
		at   time.Duration
		cost int64
	}{{0, 2}, {500 * time.Millisecond, 1}, {time.Second, 1}, {10 * time.Second, 2}} {
		var d edgelimit.Decision
		s, d = p.TakeAt(s, t0.Add(step.at), step.cost)
		fmt.Printf("t0+%s cost %d: allowed=%v remaining=%d retry-after=%s\n", step.at, step.cost, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// t0+0s cost 2: allowed=true remaining=0 retry-after=0s
	// t0+500ms cost 1: allowed=false remaining=0 retry-after=500ms
	// t0+1s cost 1: allowed=true remaining=0 retry-after=0s
	// t0+10s cost 2: allowed=true remaining=0 retry-after=0s
}
