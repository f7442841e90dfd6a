package kvbucket

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// TestDynamoDBCallsPerDecision counts the SDK's HTTP requests: the first
// decision of a key in an instance is one GetItem and one UpdateItem; in
// its first sync interval each admission is one UpdateItem; after it a
// cached decision is none and a sync one UpdateItem; a denial the local
// state proves is none, cached or not.
func TestDynamoDBCallsPerDecision(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		clk := newClock(t0)
		kv, tab := dynamoKV(t, srv, clk.Now)
		counter := tab.Counter
		pol := kvPolicy("calls", 8, 8, time.Hour, time.Second)
		uncached := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now, NoCache: true})
		cached := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})

		type calls struct{ get, update, total int }
		check := func(what string, b *Bucket, key string, wantAllowed bool, want calls) {
			t.Helper()
			counter.Reset()
			d, err := b.Allow(ctx, edgelimit.Request{Key: key})
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			got := calls{counter.Op("GetItem"), counter.Op("UpdateItem"), int(counter.Total())}
			if d.Allowed != wantAllowed || got != want {
				t.Errorf("%s: allowed %v, calls %+v, want %v, %+v", what, d.Allowed, got, wantAllowed, want)
			}
		}
		first, write := calls{1, 1, 2}, calls{0, 1, 1}
		check("uncached, new key", uncached, "u", true, first)
		check("uncached, known key", uncached, "u", true, write)
		check("uncached, same instant", uncached, "u", true, write)

		check("cached, first", cached, "c", true, first)
		check("cached, first interval", cached, "c", true, write)
		clk.Add(time.Second)
		check("cached, first sync", cached, "c", true, write)
		check("cached, hot", cached, "c", true, calls{})
		clk.Add(999 * time.Millisecond)
		check("cached, still hot", cached, "c", true, calls{})
		clk.Add(time.Millisecond)
		check("cached, sync due", cached, "c", true, write)
		check("cached, hot again", cached, "c", true, calls{})
		check("cached, the last token", cached, "c", true, calls{})
		check("cached, denied locally", cached, "c", false, calls{})

		for range 5 {
			check("uncached, spending", uncached, "u", true, write)
		}
		check("uncached, denied from the local state", uncached, "u", false, calls{})
	})
}

// TestDynamoDBSingleClientExact runs the step tables against the real
// servers: one client sees exact token-bucket behaviour, cached or not.
func TestDynamoDBSingleClientExact(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		clk := newClock(t0)
		kv, _ := dynamoKV(t, srv, clk.Now)
		for _, noCache := range []bool{false, true} {
			for ti, tc := range bucketTables() {
				t.Run(fmt.Sprintf("%s/nocache=%v", tc.name, noCache), func(t *testing.T) {
					b := mustNew(t, Config{
						Policy: kvPolicy(fmt.Sprintf("steps%d", ti), tc.p.Limit, tc.p.Capacity, tc.p.Window, 0),
						KV:     kv, Now: clk.Now, NoCache: noCache,
					})
					key := fmt.Sprintf("client-%v", noCache)
					for i, st := range tc.steps {
						clk.Set(t0.Add(st.at))
						d, err := b.Allow(ctx, edgelimit.Request{Key: key, Cost: st.cost})
						if err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
						checkStep(t, i, st, allowResult{d.Allowed, d.Remaining, d.Reset, d.RetryAfter})
					}
				})
			}
		}
	})
}
