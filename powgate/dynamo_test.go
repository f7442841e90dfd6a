package powgate_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/powgate"
)

// dynamoGate is a Gate around a durable Counter on a table of s, with its
// own replay cache (an instance). Gates made with one table share counts.
func dynamoGate(t *testing.T, api dynamostore.DynamoAPI, table string, pol *policy.Policy, o powgate.Options, now func() time.Time) edgelimit.Limiter {
	t.Helper()
	store, err := dynamostore.New(dynamostore.Config{Client: api, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	c, err := durablecounter.New(durablecounter.Config{Policy: pol, Options: &durablecounter.Options{DenyCache: true}, Store: store, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	g, err := powgate.Wrap(c, powgate.Config{Policy: pol, Options: o, Secrets: [][]byte{secret}, Now: now, Replay: pow.NewReplayCache(0)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestDynamoCalls: on DynamoDB (dynalite, moto), what a gated durable
// policy costs per request: below the threshold a GetItem (the peek) and
// the UpdateItem; a challenge a GetItem (none within PeekFreshness of the
// last read), no write; a request with a proof one UpdateItem.
func TestDynamoCalls(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		api, table, calls := ddbtest.Table(t, s)
		clock := limitertest.NewClock(tw)
		pol := &policy.Policy{Name: "search", Limit: 10, Window: time.Minute}
		g := dynamoGate(t, api, table, pol, powgate.Options{Above: 3, Bits: 4}, clock.Now)
		expect := func(what string, want map[string]int) {
			t.Helper()
			got := calls.Snapshot()
			calls.Reset()
			for op, n := range want {
				if got[op] != n {
					t.Errorf("%s: %v, want %v", what, got, want)
					return
				}
			}
			if len(got) != len(want) {
				t.Errorf("%s: %v, want %v", what, got, want)
			}
		}
		for range 3 {
			if d, err := g.Allow(ctx, request(keyA, "")); err != nil || !d.Allowed {
				t.Fatalf("below the threshold: %+v, %v", d, err)
			}
		}
		expect("3 requests below the threshold", map[string]int{"GetItem": 3, "UpdateItem": 3})
		var proof string
		for range 3 {
			clock.Advance(2 * time.Second) // past PeekFreshness: each peek reads
			d, err := g.Allow(ctx, request(keyA, ""))
			if err != nil {
				t.Fatal(err)
			}
			proof = mustChallenge(t, "a challenge", d)
		}
		expect("3 challenges 2s apart", map[string]int{"GetItem": 3})
		for range 3 {
			if _, err := g.Allow(ctx, request(keyA, "")); err != nil {
				t.Fatal(err)
			}
		}
		expect("3 challenges within PeekFreshness", map[string]int{})
		if d, err := g.Allow(ctx, request(keyA, proof)); err != nil || !d.Allowed || d.Remaining != 6 {
			t.Fatalf("with a proof: %+v, %v; want allowed, 6 left", d, err)
		}
		expect("a request with a proof", map[string]int{"UpdateItem": 1})
	})
}

// TestDynamoConcurrent: on DynamoDB, two instances (Gates with their own
// replay caches, one table), 64 goroutines at once on one key. Without
// proofs the threshold is soft (a burst that peeks before it spends passes
// it) and the limit is not; challenges spend nothing. With a distinct
// proof each (another key, every request gated), exactly the limit is
// admitted: never more, no spurious denial.
func TestDynamoConcurrent(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		api, table, _ := ddbtest.Table(t, s)
		now := func() time.Time { return tw }
		pol := &policy.Policy{Name: "search", Limit: 40, Window: time.Minute}
		var gates [2]edgelimit.Limiter
		for i := range gates {
			gates[i] = dynamoGate(t, api, table, pol, powgate.Options{Above: 20, Bits: 4}, now)
		}
		var admitted, challenged, denied atomic.Int64
		count := func(d edgelimit.Decision, err error) {
			switch {
			case err != nil:
				t.Error(err)
			case d.Allowed:
				admitted.Add(1)
			case powgate.Challenged(d):
				challenged.Add(1)
			default:
				denied.Add(1)
			}
		}
		run(goroutines, func(i int) { count(gates[i%2].Allow(ctx, request(keyA, ""))) })
		a, c, n := admitted.Load(), challenged.Load(), denied.Load()
		t.Logf("%s, %d at once without proofs: %d admitted, %d challenged, %d denied by the hard limit", s.Name, goroutines, a, c, n)
		if a < 20 || a > 40 || a+c+n != goroutines || n > 0 && a != 40 {
			t.Fatalf("without proofs: %d admitted, %d challenged, %d denied; want 20 to 40 admitted, the rest challenged, or denied once 40 are", a, c, n)
		}
		// A third instance reads the table: the burst's gates answer a peek
		// from what they last read, within PeekFreshness of the fixed clock,
		// which may be from before the burst's last admission.
		fresh := dynamoGate(t, api, table, pol, powgate.Options{Above: 20, Bits: 4}, now)
		if d, err := fresh.(edgelimit.Peeker).Peek(ctx, edgelimit.Request{Key: keyA}); err != nil || d.Remaining != 40-a {
			t.Fatalf("after the burst: %+v, %v; want %d left: a challenge spent", d, err, 40-a)
		}

		for i := range gates {
			gates[i] = dynamoGate(t, api, table, pol, powgate.Options{Above: 0, Bits: 4}, now)
		}
		proofs := challenges(t, gates[0], keyB, goroutines)
		admitted.Store(0)
		challenged.Store(0)
		denied.Store(0)
		run(goroutines, func(i int) { count(gates[i%2].Allow(ctx, request(keyB, proofs[i]))) })
		if a, c := admitted.Load(), challenged.Load(); a != 40 || c != 0 {
			t.Fatalf("with %d distinct proofs: %d admitted, %d challenged; want exactly 40 admitted, none challenged", goroutines, a, c)
		}
	})
}
