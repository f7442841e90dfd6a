package dynamostore

import (
	"context"
	"errors"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/internal/ddb/ddbcore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/policy"
)

// The Store's own tests: the item as the table holds it, the SDK's errors,
// the retry back-off and the read and write units a decision costs. What a
// KV must do (the Update semantics, on memory and both servers) and what a
// Bucket does on it are kvbucket's tests, which run this Store through a
// hook (kvbucket/dynamostore_hook_test.go).

var (
	ctx = context.Background()
	t0  = time.Unix(1_700_000_000, 0)
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newStore returns the store's conn, whose Get and Update the tests call
// (a Bucket takes conn.store()).
func newStore(t testing.TB, cfg Config) *conn {
	t.Helper()
	s, err := newConn(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// kvPolicy is a kv policy of limit per window with a burst and a sync
// interval.
func kvPolicy(name string, limit, burst int64, window, sync time.Duration) *policy.Policy {
	return &policy.Policy{Name: name, Limit: limit, Window: window, Cost: 1, Strategy: kvbucket.Strategy,
		Options: &kvbucket.Options{Burst: burst, SyncInterval: sync}}
}

func newBucket(t testing.TB, cfg kvbucket.Config) *kvbucket.Bucket {
	t.Helper()
	b, err := kvbucket.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mulWide returns a×b as a Wide (beyond 64 bits).
func mulWide(a, b int64) wire.Wide {
	w, err := wire.ParseWide(new(big.Int).Mul(big.NewInt(a), big.NewInt(b)).String())
	if err != nil {
		panic(err)
	}
	return w
}

// TestItem pins the item as the table holds it, and what a reader
// makes of a foreign one.
func TestItem(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		clk := newClock(t0)
		client, table, _ := ddbtest.Table(t, srv)
		kv := newStore(t, Config{Client: client, Table: table, Now: clk.Now})
		tat := mulWide(t0.UnixNano(), 7).Add(wire.WideOf(3))
		if _, err := kv.Update(ctx, "p#k", wire.Update{Add: wire.WideOf(3), Spent: 1, Floor: mulWide(t0.UnixNano(), 7), HasFloor: true, RaiseFirst: true,
			Writer: 42, Epoch: 1_700_000_000, TTL: 90*time.Second + time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{ddbcore.AttrPK: &types.AttributeValueMemberS{Value: "kv#p#k"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		wantItem := map[string]string{
			AttrTAT:               tat.String(),
			AttrSpent:             "1",
			ddbcore.AttrExpiresAt: strconv.FormatInt(t0.Unix()+91, 10), // rounded up
		}
		for name, v := range wantItem {
			n, ok := out.Item[name].(*types.AttributeValueMemberN)
			if !ok || n.Value != v {
				t.Errorf("item attribute %s = %#v, want N %s", name, out.Item[name], v)
			}
		}
		if ns, ok := out.Item["w1700000000"].(*types.AttributeValueMemberNS); !ok || !slices.Equal(ns.Value, []string{"42"}) {
			t.Errorf("item attribute w1700000000 = %#v, want NS [42]", out.Item["w1700000000"])
		}

		// A foreign item under our key is an error, not a panic.
		for name, attr := range map[string]types.AttributeValue{
			AttrTAT:       &types.AttributeValueMemberS{Value: "many"},
			AttrSpent:     &types.AttributeValueMemberN{Value: "1e40"},
			"w7":          &types.AttributeValueMemberSS{Value: []string{"x"}},
			"w8":          &types.AttributeValueMemberNS{Value: []string{"99999999999"}},
			AttrTAT + "2": &types.AttributeValueMemberS{Value: "ignored"},
		} {
			if name == AttrTAT+"2" {
				continue
			}
			_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
				ddbcore.AttrPK: &types.AttributeValueMemberS{Value: "kv#p#bad-" + name},
				name:           attr,
			}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Get(ctx, "p#bad-"+name, wire.Strong); !errors.Is(err, kvbucket.ErrBadItem) {
				t.Errorf("Get(item with a bad %s) = %v, want kvbucket.ErrBadItem", name, err)
			}
		}
		_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			ddbcore.AttrPK: &types.AttributeValueMemberS{Value: "kv#p#frac"},
			AttrTAT:        &types.AttributeValueMemberN{Value: "1.5"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx, "p#frac", wire.Strong); !errors.Is(err, kvbucket.ErrBadItem) {
			t.Errorf("Get(fractional TAT) = %v, want kvbucket.ErrBadItem", err)
		}
	})
}

// capacityClient wraps a DynamoAPI and asks the server for the capacity
// each call consumes (ReturnConsumedCapacity TOTAL), by kind of call.
type capacityClient struct {
	DynamoAPI
	mu               sync.Mutex
	strong, eventual int
	strongRCU, evRCU float64
	updates          int
	wcu              float64
}

func (c *capacityClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DynamoAPI.GetItem(ctx, in, opts...)
	var units float64
	if out != nil && out.ConsumedCapacity != nil {
		units = aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if aws.ToBool(in.ConsistentRead) {
		c.strong++
		c.strongRCU += units
	} else {
		c.eventual++
		c.evRCU += units
	}
	return out, err
}

func (c *capacityClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.DynamoAPI.UpdateItem(ctx, in, opts...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updates++
	if out != nil && out.ConsumedCapacity != nil {
		c.wcu += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
	}
	return out, err
}

func (c *capacityClient) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.strong, c.eventual, c.updates = 0, 0, 0
	c.strongRCU, c.evRCU, c.wcu = 0, 0, 0
}

// TestReadCost measures what a decision costs in units on the real
// servers: the first sync of a key in an instance (and the first after the
// key was dropped from its cache) reads strongly, 1 read unit, and writes
// (1 write unit); a sync after the first interval writes only (1 write
// unit: the write's answer is the fresh state, so no read); a cached
// decision nothing. dynalite computes the units as DynamoDB does; moto
// does not report them here, so only the kinds of call are checked there.
func TestReadCost(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		clk := newClock(t0)
		client, table, _ := ddbtest.Table(t, srv)
		cc := &capacityClient{DynamoAPI: client}
		kv := newStore(t, Config{Client: cc, Table: table, Now: clk.Now})
		b := newBucket(t, kvbucket.Config{Policy: kvPolicy("cost", 10, 10, time.Hour, time.Second), KV: kv.store(), Now: clk.Now, CacheSize: 1})
		type cost struct {
			strong, eventual, updates int
			rcu, wcu                  float64
		}
		step := func(what string, key string, want cost) {
			t.Helper()
			cc.reset()
			if _, err := b.Allow(ctx, edgelimit.Request{Key: key}); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			cc.mu.Lock()
			got := cost{cc.strong, cc.eventual, cc.updates, cc.strongRCU + cc.evRCU, cc.wcu}
			cc.mu.Unlock()
			if srv.Name != "dynalite" {
				got.rcu, got.wcu, want.rcu, want.wcu = 0, 0, 0, 0
			}
			if got != want {
				t.Errorf("%s: %+v, want %+v", what, got, want)
			}
			t.Logf("%s on %s: %+v", what, srv.Name, got)
		}
		step("first sync of a key", "a", cost{strong: 1, updates: 1, rcu: 1, wcu: 1})
		step("first sync interval: written through", "a", cost{updates: 1, wcu: 1})
		clk.Add(time.Second)
		step("next sync", "a", cost{updates: 1, wcu: 1})
		clk.Add(100 * time.Millisecond)
		step("cached", "a", cost{})
		clk.Add(time.Second)
		step("sync, writing back the cached spend", "a", cost{updates: 1, wcu: 1})
		step("another key (a, clean, dropped)", "b", cost{strong: 1, updates: 1, rcu: 1, wcu: 1})
		step("a read back", "a", cost{strong: 1, updates: 1, rcu: 1, wcu: 1})
	})
}

// fakeDynamo is a DynamoAPI for error paths only.
type fakeDynamo struct {
	getOut *dynamodb.GetItemOutput
	err    error
	// sawCtx records the ctx of the last call.
	sawCtx context.Context
}

func (f *fakeDynamo) GetItem(ctx context.Context, _ *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.sawCtx = ctx
	return f.getOut, f.err
}

func (f *fakeDynamo) UpdateItem(ctx context.Context, _ *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.sawCtx = ctx
	return &dynamodb.UpdateItemOutput{}, f.err
}

func (f *fakeDynamo) BatchGetItem(ctx context.Context, _ *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	f.sawCtx = ctx
	return &dynamodb.BatchGetItemOutput{}, f.err
}

func TestErrors(t *testing.T) {
	if _, err := New(Config{Table: "t"}); !errors.Is(err, kvbucket.ErrConfig) {
		t.Errorf("New without a client = %v, want kvbucket.ErrConfig", err)
	}
	if _, err := New(Config{Client: &fakeDynamo{}}); !errors.Is(err, kvbucket.ErrConfig) {
		t.Errorf("New without a table = %v, want kvbucket.ErrConfig", err)
	}

	throttle := &smithy.GenericAPIError{Code: "ThrottlingException", Message: "slow down"}
	other := errors.New("connection reset")
	for _, tc := range []struct {
		name     string
		err      error
		throttle bool
	}{{"throttle", throttle, true}, {"other", other, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDynamo{err: tc.err}
			kv, _ := newConn(Config{Client: f, Table: "t"})
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_, gerr := kv.Get(cctx, "p#k", wire.Eventual)
			if f.sawCtx != cctx {
				t.Error("Get did not pass its ctx to the SDK")
			}
			_, perr := kv.Update(cctx, "p#k", wire.Update{Add: wire.WideOf(1)})
			if f.sawCtx != cctx {
				t.Error("Update did not pass its ctx to the SDK")
			}
			for _, err := range []error{gerr, perr} {
				if !errors.Is(err, tc.err) || errors.Is(err, kvbucket.ErrThrottled) != tc.throttle {
					t.Errorf("error = %v, want it to wrap %v (throttled %v)", err, tc.err, tc.throttle)
				}
			}
			// Through a Bucket: the error comes back, nothing panics.
			b := newBucket(t, kvbucket.Config{Policy: kvPolicy("p", 1, 1, time.Second, 0), KV: kv.store()})
			if _, err := b.Allow(cctx, edgelimit.Request{Key: "k"}); !errors.Is(err, tc.err) {
				t.Errorf("Allow = %v, want %v", err, tc.err)
			}
		})
	}

	for _, tc := range []struct {
		name string
		item map[string]types.AttributeValue
	}{
		{"tat a string", map[string]types.AttributeValue{AttrTAT: &types.AttributeValueMemberS{Value: "1"}}},
		{"fraction", map[string]types.AttributeValue{AttrTAT: &types.AttributeValueMemberN{Value: "1.5"}}},
		{"overflow", map[string]types.AttributeValue{AttrTAT: &types.AttributeValueMemberN{Value: "1" + strings.Repeat("0", 40)}}},
		{"spent a fraction", map[string]types.AttributeValue{AttrSpent: &types.AttributeValueMemberN{Value: "0.5"}}},
		{"writers not a set", map[string]types.AttributeValue{"w1": &types.AttributeValueMemberN{Value: "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, _ := newConn(Config{Client: &fakeDynamo{getOut: &dynamodb.GetItemOutput{Item: tc.item}}, Table: "t"})
			if _, err := kv.Get(ctx, "p#k", wire.Eventual); !errors.Is(err, kvbucket.ErrBadItem) {
				t.Errorf("Get = %v, want kvbucket.ErrBadItem", err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"region not among regions", Config{Client: &fakeDynamo{}, Table: "t", Region: "a", Regions: []string{"b"}}},
		{"regions without a region", Config{Client: &fakeDynamo{}, Table: "t", Regions: []string{"a", "b"}}},
		{"bad region name", Config{Client: &fakeDynamo{}, Table: "t", Region: "a", Regions: []string{"a", "b@c"}}},
	} {
		if _, err := New(tc.cfg); !errors.Is(err, kvbucket.ErrConfig) {
			t.Errorf("New(%s) = %v, want kvbucket.ErrConfig", tc.name, err)
		}
	}
}

// slowRetryer is a client's retryer whose back-off is a second, as the
// SDK's own is for a throttled call (up to seconds, growing per attempt):
// fixed, so that the test does not depend on the SDK's jitter.
type slowRetryer struct{ aws.Retryer }

func (slowRetryer) RetryDelay(int, error) (time.Duration, error) { return time.Second, nil }

// throttlingDynamo is a DynamoAPI that throttles every call and runs the
// SDK's retry loop on a fake clock: it applies the call's options to the
// client's options, as the SDK does per call, then asks the resulting
// retryer attempt after attempt whether to retry and how long to wait, and
// adds the waits up instead of sleeping.
type throttlingDynamo struct {
	base     dynamodb.Options
	attempts int
	waited   time.Duration // the back-off the SDK would have slept
}

func (f *throttlingDynamo) call(opts []func(*dynamodb.Options)) error {
	o := f.base.Copy()
	for _, fn := range opts {
		fn(&o)
	}
	err := &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate of requests exceeds the allowed throughput."}
	for attempt := 1; ; attempt++ {
		f.attempts++
		if attempt >= o.Retryer.MaxAttempts() || !o.Retryer.IsErrorRetryable(err) {
			return err
		}
		d, derr := o.Retryer.RetryDelay(attempt, err)
		if derr != nil {
			return derr
		}
		f.waited += d
	}
}

func (f *throttlingDynamo) GetItem(_ context.Context, _ *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return nil, f.call(opts)
}

func (f *throttlingDynamo) UpdateItem(_ context.Context, _ *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return nil, f.call(opts)
}

func (f *throttlingDynamo) BatchGetItem(_ context.Context, _ *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	return nil, f.call(opts)
}

// TestRetryBackoffFitsTheBudget pins issue #10's "time budgets"
// for kv: under throttling the KV waited out its whole budget (a median
// of 101 ms at 100 ms), because the SDK's back-off between attempts is up to
// seconds, where durablecounter caps it (35 ms). Config.RetryBackoff
// caps it the same way (default 10 ms): a throttled call makes the client's
// attempts, no more, and gives up after their back-off, well inside the
// default 100 ms budget. Counted on a fake clock, not timed.
func TestRetryBackoffFitsTheBudget(t *testing.T) {
	client, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	base := client.Options()
	base.Retryer = slowRetryer{base.Retryer}
	attempts := base.Retryer.MaxAttempts()
	budget := 100 * time.Millisecond
	for _, tc := range []struct {
		name    string
		backoff time.Duration
		want    time.Duration // back-off in all, per call
	}{
		{"default", 0, time.Duration(attempts-1) * DefaultRetryBackoff},
		{"5ms", 5 * time.Millisecond, time.Duration(attempts-1) * 5 * time.Millisecond},
		{"client's own", -1, time.Duration(attempts-1) * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &throttlingDynamo{base: base}
			kv, err := newConn(Config{Client: f, Table: "t", RetryBackoff: tc.backoff})
			if err != nil {
				t.Fatal(err)
			}
			// Through a Bucket, as the engine calls it: the read is
			// throttled, so nothing is written.
			b := newBucket(t, kvbucket.Config{Policy: kvPolicy("p", 1, 1, time.Second, 0), KV: kv.store()})
			if _, err := b.Allow(ctx, edgelimit.Request{Key: "k"}); !errors.Is(err, kvbucket.ErrThrottled) {
				t.Errorf("Allow = %v, want kvbucket.ErrThrottled", err)
			}
			if _, err := kv.Update(ctx, "p#k", wire.Update{Add: wire.WideOf(1)}); !errors.Is(err, kvbucket.ErrThrottled) {
				t.Errorf("Update = %v, want kvbucket.ErrThrottled", err)
			}
			if f.attempts != 2*attempts || f.waited != 2*tc.want {
				t.Errorf("2 calls: %d attempts, %s of back-off; want %d, %s", f.attempts, f.waited, 2*attempts, 2*tc.want)
			}
			if perCall := f.waited / 2; tc.backoff >= 0 && perCall >= budget/2 {
				t.Errorf("a throttled call backs off %s in all, want well inside the %s budget", perCall, budget)
			}
		})
	}
}
