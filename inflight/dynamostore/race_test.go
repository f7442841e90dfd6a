package dynamostore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/inflight/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// beforeWrite runs hook once, just before the n-th UpdateItem its client
// sends: between a take's read of the item and its reclaiming write.
type beforeWrite struct {
	dynamostore.API
	n    int
	hook func()
	mu   sync.Mutex
	seen int
}

func (b *beforeWrite) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	b.mu.Lock()
	b.seen++
	fire := b.seen == b.n
	b.mu.Unlock()
	if fire {
		b.hook()
	}
	return b.API.UpdateItem(ctx, in, opts...)
}

// TestReclaimMeetsLateRelease pins the interleaving that the reclaiming
// write's per-holder conditions exist for. With limit 2, B's lease ended
// unreleased and A's runs. X's take reads {A, B} and will reclaim B; before
// its write lands, B's holder releases it late and C takes the freed slot:
// the count is 2 again, {A, C}. X's write must fail (B is not there with
// the expiry X read) and X is denied; a write conditioned on the count
// alone would pass and leave three holders for a limit of two.
func TestReclaimMeetsLateRelease(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		client, table, _ := ddbtest.Table(t, s)
		plain, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		clock := limitertest.NewClock(t0)
		newLim := func(store inflight.Store) *inflight.Limiter {
			l, err := inflight.New(inflight.Config{
				Policy: &policy.Policy{Name: "speech", Limit: 2, Window: time.Minute}, Store: store, Now: clock.Now,
			})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		other := newLim(plain)
		ctx := testCtx(t)
		r := edgelimit.Request{Key: "k"}
		allow := func(l *inflight.Limiter, what string, want bool) edgelimit.Decision {
			t.Helper()
			d, err := l.Allow(ctx, r)
			if err != nil || d.Allowed != want {
				t.Fatalf("%s: %+v, %v; want allowed %v", what, d, err, want)
			}
			return d
		}
		b := allow(other, "B at T0", true)
		clock.Set(t0.Add(30 * time.Second))
		allow(other, "A at T0+30s", true)
		clock.Set(t0.Add(time.Minute)) // B's lease has ended; A's runs

		hooked := &beforeWrite{API: client, n: 2, hook: func() {
			if err := other.Finish(ctx, r, b, 200, 0); err != nil {
				t.Error(err)
			}
			allow(other, "C, after B's late release", true)
		}}
		racing, err := dynamostore.New(dynamostore.Config{Client: hooked, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		allow(newLim(racing), "X, whose reclaim of B meets B's release and C's take", false)
		if d, err := other.Peek(ctx, r); err != nil || d.Remaining != 0 || d.Allowed {
			t.Fatalf("after the race: %+v, %v; want 2 live, none free", d, err)
		}
		if hooked.seen < 2 {
			t.Fatalf("X sent %d writes; the interleaving did not happen", hooked.seen)
		}
	})
}

// beforeRead runs hook once, just before the first GetItem its client
// sends: on a server that ignores ALL_OLD, between a take's failed write and
// its read of the item.
type beforeRead struct {
	dynamostore.API
	once sync.Once
	hook func()
}

func (b *beforeRead) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	b.once.Do(b.hook)
	return b.API.GetItem(ctx, in, opts...)
}

// TestReleaseBeforeRead: on a server that ignores ALL_OLD (dynalite), a
// take whose write failed with the limit held reads the item; a release
// that lands in between freed a slot, and the take must get it (its write
// again), not be denied by a state that no longer holds.
func TestReleaseBeforeRead(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		if s.OldOnConditionFailure {
			t.Skip("the failed write returns the item: no read to race with")
		}
		client, table, _ := ddbtest.Table(t, s)
		plain, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		clock := limitertest.NewClock(t0)
		newLim := func(store inflight.Store) *inflight.Limiter {
			l, err := inflight.New(inflight.Config{
				Policy: &policy.Policy{Name: "speech", Limit: 1, Window: time.Minute}, Store: store, Now: clock.Now,
			})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		other := newLim(plain)
		ctx := testCtx(t)
		r := edgelimit.Request{Key: "k"}
		a, err := other.Allow(ctx, r)
		if err != nil || !a.Allowed {
			t.Fatal(a, err)
		}
		hooked := &beforeRead{API: client, hook: func() {
			if err := other.Finish(ctx, r, a, 200, 0); err != nil {
				t.Error(err)
			}
		}}
		racing, err := dynamostore.New(dynamostore.Config{Client: hooked, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := newLim(racing).Allow(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("a take whose read follows a release: %+v, %v; want allowed", d, err)
		}
	})
}
