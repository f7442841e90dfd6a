package kvbucket

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// dynamoKV returns a DynamoDB KV on a fresh table of s, its client and the
// counter of its calls.
func dynamoKV(t *testing.T, s ddbtest.Server, now func() time.Time) (*DynamoDB, *dynamodb.Client, string, *ddbtest.Counter) {
	t.Helper()
	client, table, counter := ddbtest.Table(t, s)
	kv, err := NewDynamoDB(DynamoDBConfig{Client: client, Table: table, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return kv, client, table, counter
}

// kvUnderTest is a KV to run the conformance cases against, with the
// counter of its SDK calls (nil for memory).
type kvUnderTest struct {
	name    string
	kv      KV
	counter *ddbtest.Counter
	// other is a second region's view of the same table (DynamoDB only).
	other KV
}

// forEachKV runs f on the memory KV and on a fresh table of each server.
func forEachKV(t *testing.T, f func(t *testing.T, k kvUnderTest, clk *clock)) {
	t.Run("memory", func(t *testing.T) {
		clk := newClock(t0)
		f(t, kvUnderTest{name: "memory", kv: NewMemory(MemoryConfig{Now: clk.Now})}, clk)
	})
	for _, srv := range ddbtest.Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			clk := newClock(t0)
			kv, client, table, counter := dynamoKV(t, srv, clk.Now)
			f(t, kvUnderTest{name: srv.Name, kv: kv, counter: counter, other: regionKV(t, client, table, clk, "b")}, clk)
		})
	}
}

// regionKV returns a DynamoDB KV of region r in a deployment over regions
// a and b, on table.
func regionKV(t *testing.T, client DynamoDBAPI, table string, clk *clock, r string) *DynamoDB {
	t.Helper()
	kv, err := NewDynamoDB(DynamoDBConfig{Client: client, Table: table, Now: clk.Now, Region: r, Regions: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestKVUpdateSemantics is the KV conformance suite: the memory KV and
// DynamoDB (on dynalite and moto) apply an Update alike. A raise sets the
// TAT to its floor plus the addition when it is below the floor; otherwise
// the addition adds; a conditional update that does not fit changes
// nothing; writers are registered per epoch and old epochs dropped. Values
// beyond 64 bits round-trip exactly.
func TestKVUpdateSemantics(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		calls := func() int64 {
			if k.counter == nil {
				return 0
			}
			n := k.counter.Total()
			k.counter.Reset()
			return n
		}
		update := func(what string, u Update, applied bool, tat int64, spent int64, writers []Writer) Tally {
			t.Helper()
			got, err := k.kv.Update(ctx, "p#k", u)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if got.Applied != applied || !got.Own.Has || got.Own.TAT != WideOf(tat) || got.Own.Spent != spent || !sameWriters(got.Own.Writers, writers) {
				t.Errorf("%s = %+v, want applied %v, TAT %d, spent %d, writers %v", what, got, applied, tat, spent, writers)
			}
			return got
		}
		if got, err := k.kv.Get(ctx, "p#k", Eventual); err != nil || got.Own.Has {
			t.Fatalf("Get(missing) = %+v, %v, want no state", got, err)
		}
		calls()
		update("raise of a missing part", Update{Add: WideOf(7), Spent: 1, Floor: WideOf(100), HasFloor: true, RaiseFirst: true,
			Writer: 5, Epoch: 10, TTL: time.Minute}, true, 107, 1, []Writer{{10, 5}})
		if n := calls(); k.counter != nil && n != 1 {
			t.Errorf("a raise guessed right took %d calls, want 1", n)
		}
		update("add above the floor, guessed as a raise", Update{Add: WideOf(3), Spent: 1, Floor: WideOf(50), HasFloor: true, RaiseFirst: true,
			Writer: 6, Epoch: 10, TTL: time.Minute}, true, 110, 2, []Writer{{10, 5}, {10, 6}})
		if n := calls(); k.counter != nil && n != 2 {
			t.Errorf("a raise guessed wrong took %d calls, want 2", n)
		}
		update("raise below the floor, guessed as an add", Update{Add: WideOf(2), Spent: 1, Floor: WideOf(200), HasFloor: true,
			Writer: 5, Epoch: 10, TTL: time.Minute}, true, 202, 3, []Writer{{10, 5}, {10, 6}})
		update("add without a floor", Update{Add: WideOf(-2), Spent: -1, Writer: 5, Epoch: 11, TTL: time.Minute},
			true, 200, 2, []Writer{{10, 5}, {10, 6}, {11, 5}})
		calls()
		update("conditional, does not fit", Update{Add: WideOf(5), Spent: 1, Floor: WideOf(100), HasFloor: true,
			Conditional: true, MaxTAT: WideOf(199), Writer: 7, Epoch: 11, TTL: time.Minute}, false, 200, 2, []Writer{{10, 5}, {10, 6}, {11, 5}})
		update("conditional, fits", Update{Add: WideOf(5), Spent: 1, Floor: WideOf(100), HasFloor: true,
			Conditional: true, MaxTAT: WideOf(200), Writer: 7, Epoch: 11, TTL: time.Minute}, true, 205, 3, []Writer{{10, 5}, {10, 6}, {11, 5}, {11, 7}})
		update("conditional on spent, does not fit", Update{Add: WideOf(5), Spent: 1, Floor: WideOf(100), HasFloor: true,
			Conditional: true, MaxTAT: WideOf(1000), MaxSpent: 2, HasMaxSpent: true, Writer: 8, Epoch: 11, TTL: time.Minute}, false, 205, 3, []Writer{{10, 5}, {10, 6}, {11, 5}, {11, 7}})
		update("conditional raise", Update{Add: WideOf(5), Spent: 1, Floor: WideOf(300), HasFloor: true, RaiseFirst: true,
			Conditional: true, MaxTAT: WideOf(10), MaxSpent: 3, HasMaxSpent: true, Writer: 8, Epoch: 11, TTL: time.Minute}, true, 305, 4, []Writer{{10, 5}, {10, 6}, {11, 5}, {11, 7}, {11, 8}})
		update("a later epoch drops the writers before the previous one", Update{Add: WideOf(1), Writer: 9, Epoch: 12, Stale: []int64{10}, TTL: time.Minute},
			true, 306, 4, []Writer{{11, 5}, {11, 7}, {11, 8}, {12, 9}})
		update("a cap lowers a TAT from a clock far ahead", Update{Add: WideOf(1), Cap: WideOf(250), HasCap: true, Writer: 9, Epoch: 12, TTL: time.Minute},
			true, 251, 4, []Writer{{11, 5}, {11, 7}, {11, 8}, {12, 9}})
		if got, err := k.kv.Get(ctx, "p#k", Strong); err != nil || got.Own.TAT != WideOf(251) || got.Own.Spent != 4 {
			t.Errorf("Get = %+v, %v, want TAT 251, spent 4", got, err)
		}

		// Beyond 64 bits: an instant of now times a limit of a billion.
		big := mulWide(t0.UnixNano(), 1_000_000_000).Add(WideOf(12345))
		got, err := k.kv.Update(ctx, "p#big", Update{Add: WideOf(1), Floor: big, HasFloor: true, RaiseFirst: true, TTL: time.Minute})
		if err != nil || got.Own.TAT != big.Add(WideOf(1)) {
			t.Errorf("Update(big) = %+v, %v, want TAT %s", got, err, big.Add(WideOf(1)))
		}
		if got, err := k.kv.Get(ctx, "p#big", Strong); err != nil || got.Own.TAT != big.Add(WideOf(1)) {
			t.Errorf("Get(big) = %+v, %v, want TAT %s", got, err, big.Add(WideOf(1)))
		}

		// A concurrent burst of additions all land: none replaces another.
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				if _, err := k.kv.Update(ctx, "p#many", Update{Add: WideOf(10), Spent: 1, Floor: WideOf(1000), HasFloor: true, RaiseFirst: i%2 == 0, Writer: uint32(i + 1), Epoch: 1, TTL: time.Minute}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if got, err := k.kv.Get(ctx, "p#many", Strong); err != nil || got.Own.TAT != WideOf(1160) || got.Own.Spent != 16 || len(got.Own.Writers) != 16 {
			t.Errorf("after 16 concurrent additions: %+v, %v, want TAT 1160, spent 16, 16 writers", got, err)
		}

		if k.other == nil {
			return
		}
		// Regions: each writes its own item, and reads the other's.
		a := k.kv.(*DynamoDB)
		ra := regionKV(t, a.client, *a.table, clk, "a")
		if _, err := ra.Update(ctx, "p#r", Update{Add: WideOf(5), Spent: 1, Floor: WideOf(100), HasFloor: true, RaiseFirst: true, Writer: 1, Epoch: 1, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		got, err = k.other.Update(ctx, "p#r", Update{Add: WideOf(7), Spent: 2, Floor: WideOf(50), HasFloor: true, RaiseFirst: true, Writer: 2, Epoch: 1, TTL: time.Minute})
		if err != nil || got.Own.TAT != WideOf(57) || got.Own.Spent != 2 || len(got.Others) != 1 || got.Others[0].TAT != WideOf(105) || got.Others[0].Spent != 1 {
			t.Errorf("region b's update = %+v, %v, want its own TAT 57 spent 2 and a's TAT 105 spent 1", got, err)
		}
		for _, r := range []string{"p#r@a", "p#r@b"} {
			if got, _ := k.kv.Get(ctx, r, Strong); !got.Own.Has {
				t.Errorf("no item %q: each region writes an item of its own", ItemPrefix+r)
			}
		}
		if got, err := ra.Get(ctx, "p#r", Eventual); err != nil || got.Own.TAT != WideOf(105) || len(got.Others) != 1 || got.Others[0].TAT != WideOf(57) {
			t.Errorf("region a's read = %+v, %v, want its own 105 and b's 57", got, err)
		}
	})
}

func sameWriters(got, want []Writer) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

// TestDynamoDBItem pins the item as the table holds it, and what a reader
// makes of a foreign one.
func TestDynamoDBItem(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		clk := newClock(t0)
		kv, client, table, _ := dynamoKV(t, srv, clk.Now)
		tat := mulWide(t0.UnixNano(), 7).Add(WideOf(3))
		if _, err := kv.Update(ctx, "p#k", Update{Add: WideOf(3), Spent: 1, Floor: mulWide(t0.UnixNano(), 7), HasFloor: true, RaiseFirst: true,
			Writer: 42, Epoch: 1_700_000_000, TTL: 90*time.Second + time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{ddb.AttrPK: &types.AttributeValueMemberS{Value: "kv#p#k"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		wantItem := map[string]string{
			AttrTAT:           tat.String(),
			AttrSpent:         "1",
			ddb.AttrExpiresAt: strconv.FormatInt(t0.Unix()+91, 10), // rounded up
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
				ddb.AttrPK: &types.AttributeValueMemberS{Value: "kv#p#bad-" + name},
				name:       attr,
			}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Get(ctx, "p#bad-"+name, Strong); !errors.Is(err, ErrBadItem) {
				t.Errorf("Get(item with a bad %s) = %v, want ErrBadItem", name, err)
			}
		}
		_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			ddb.AttrPK: &types.AttributeValueMemberS{Value: "kv#p#frac"},
			AttrTAT:    &types.AttributeValueMemberN{Value: "1.5"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx, "p#frac", Strong); !errors.Is(err, ErrBadItem) {
			t.Errorf("Get(fractional TAT) = %v, want ErrBadItem", err)
		}
	})
}

// TestDynamoDBCallsPerDecision counts the SDK's HTTP requests: the first
// decision of a key in an instance is one GetItem and one UpdateItem; in
// its first sync interval each admission is one UpdateItem; after it a
// cached decision is none and a sync one UpdateItem; a denial the local
// state proves is none, cached or not.
func TestDynamoDBCallsPerDecision(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		clk := newClock(t0)
		kv, _, _, counter := dynamoKV(t, srv, clk.Now)
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
		kv, _, _, _ := dynamoKV(t, srv, clk.Now)
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

// fakeDynamo is a DynamoDBAPI for error paths only.
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

func TestDynamoDBErrors(t *testing.T) {
	if _, err := NewDynamoDB(DynamoDBConfig{Table: "t"}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("NewDynamoDB without a client = %v, want ErrBadConfig", err)
	}
	if _, err := NewDynamoDB(DynamoDBConfig{Client: &fakeDynamo{}}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("NewDynamoDB without a table = %v, want ErrBadConfig", err)
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
			kv, _ := NewDynamoDB(DynamoDBConfig{Client: f, Table: "t"})
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_, gerr := kv.Get(cctx, "p#k", Eventual)
			if f.sawCtx != cctx {
				t.Error("Get did not pass its ctx to the SDK")
			}
			_, perr := kv.Update(cctx, "p#k", Update{Add: WideOf(1)})
			if f.sawCtx != cctx {
				t.Error("Update did not pass its ctx to the SDK")
			}
			for _, err := range []error{gerr, perr} {
				if !errors.Is(err, tc.err) || errors.Is(err, ErrThrottled) != tc.throttle {
					t.Errorf("error = %v, want it to wrap %v (throttled %v)", err, tc.err, tc.throttle)
				}
			}
			// Through a Bucket: the error comes back, nothing panics.
			b := mustNew(t, Config{Policy: kvPolicy("p", 1, 1, time.Second, 0), KV: kv})
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
			kv, _ := NewDynamoDB(DynamoDBConfig{Client: &fakeDynamo{getOut: &dynamodb.GetItemOutput{Item: tc.item}}, Table: "t"})
			if _, err := kv.Get(ctx, "p#k", Eventual); !errors.Is(err, ErrBadItem) {
				t.Errorf("Get = %v, want ErrBadItem", err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		cfg  DynamoDBConfig
	}{
		{"region not among regions", DynamoDBConfig{Client: &fakeDynamo{}, Table: "t", Region: "a", Regions: []string{"b"}}},
		{"regions without a region", DynamoDBConfig{Client: &fakeDynamo{}, Table: "t", Regions: []string{"a", "b"}}},
		{"bad region name", DynamoDBConfig{Client: &fakeDynamo{}, Table: "t", Region: "a", Regions: []string{"a", "b@c"}}},
	} {
		if _, err := NewDynamoDB(tc.cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("NewDynamoDB(%s) = %v, want ErrBadConfig", tc.name, err)
		}
	}
}

// slowRetryer is a client's retryer whose back-off is a second, as the
// SDK's own is for a throttled call (up to seconds, growing per attempt):
// fixed, so that the test does not depend on the SDK's jitter.
type slowRetryer struct{ aws.Retryer }

func (slowRetryer) RetryDelay(int, error) (time.Duration, error) { return time.Second, nil }

// throttlingDynamo is a DynamoDBAPI that throttles every call and runs the
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

// TestDynamoDBRetryBackoffFitsTheBudget pins issue #10's "time budgets"
// for kv: under throttling the KV waited out its whole budget (a median
// of 101 ms at 100 ms), because the SDK's back-off between attempts is up to
// seconds, where durablecounter caps it (35 ms). DynamoDBConfig.RetryBackoff
// caps it the same way (default 10 ms): a throttled call makes the client's
// attempts, no more, and gives up after their back-off, well inside the
// default 100 ms budget. Counted on a fake clock, not timed.
func TestDynamoDBRetryBackoffFitsTheBudget(t *testing.T) {
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
			kv, err := NewDynamoDB(DynamoDBConfig{Client: f, Table: "t", RetryBackoff: tc.backoff})
			if err != nil {
				t.Fatal(err)
			}
			// Through a Bucket, as the engine calls it: the read is
			// throttled, so nothing is written.
			b := mustNew(t, Config{Policy: kvPolicy("p", 1, 1, time.Second, 0), KV: kv})
			if _, err := b.Allow(ctx, edgelimit.Request{Key: "k"}); !errors.Is(err, ErrThrottled) {
				t.Errorf("Allow = %v, want ErrThrottled", err)
			}
			if _, err := kv.Update(ctx, "p#k", Update{Add: WideOf(1)}); !errors.Is(err, ErrThrottled) {
				t.Errorf("Update = %v, want ErrThrottled", err)
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
