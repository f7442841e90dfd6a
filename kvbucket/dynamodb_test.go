package kvbucket

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

func TestDynamoDBKV(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		clk := newClock(t0)
		kv, client, table, _ := dynamoKV(t, srv, clk.Now)

		if _, ok, err := kv.Get(ctx, "p#missing", Eventual); ok || err != nil {
			t.Errorf("Get(missing) = found %v, %v, want not found", ok, err)
		}
		want := State{Tokens: 1_500_000_000, At: t0.UnixNano() + 7}
		if err := kv.Put(ctx, "p#k", want, 90*time.Second+time.Millisecond); err != nil {
			t.Fatal(err)
		}
		for _, c := range []Consistency{Strong, Eventual} {
			got, ok, err := kv.Get(ctx, "p#k", c)
			if err != nil || !ok || got != want {
				t.Errorf("Get(%s) = %+v, %v, %v, want %+v", c, got, ok, err, want)
			}
		}

		// The item as the table holds it.
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{ddb.AttrPK: &types.AttributeValueMemberS{Value: "kv#p#k"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		wantItem := map[string]string{
			AttrTokens:        "1500000000",
			AttrAt:            strconv.FormatInt(t0.UnixNano()+7, 10),
			ddb.AttrExpiresAt: strconv.FormatInt(t0.Unix()+91, 10), // rounded up
		}
		for name, v := range wantItem {
			n, ok := out.Item[name].(*types.AttributeValueMemberN)
			if !ok || n.Value != v {
				t.Errorf("item attribute %s = %#v, want N %s", name, out.Item[name], v)
			}
		}

		// Past expires_at the item reads as absent, though TTL has not
		// deleted it.
		clk.Set(t0.Add(91 * time.Second))
		if _, ok, err := kv.Get(ctx, "p#k", Strong); ok || err != nil {
			t.Errorf("Get(expired) = found %v, %v, want not found", ok, err)
		}

		// A foreign item under our key is an error, not a panic.
		_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			ddb.AttrPK:        &types.AttributeValueMemberS{Value: "kv#p#bad"},
			AttrTokens:        &types.AttributeValueMemberS{Value: "many"},
			ddb.AttrExpiresAt: &types.AttributeValueMemberN{Value: strconv.FormatInt(t0.Unix()+3600, 10)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := kv.Get(ctx, "p#bad", Strong); !errors.Is(err, ErrBadItem) {
			t.Errorf("Get(foreign item) = %v, want ErrBadItem", err)
		}
	})
}

// TestDynamoDBCallsPerDecision counts the SDK's HTTP requests: an uncached
// decision is exactly one GetItem and one PutItem, a cached one none.
func TestDynamoDBCallsPerDecision(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		clk := newClock(t0)
		kv, _, _, counter := dynamoKV(t, srv, clk.Now)
		pol := kvPolicy("calls", 5, 5, time.Hour, time.Second)
		uncached := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now, NoCache: true})
		cached := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})

		type calls struct{ get, put, total int }
		check := func(what string, b *Bucket, key string, wantAllowed bool, want calls) {
			t.Helper()
			counter.Reset()
			d, err := b.Allow(ctx, edgelimit.Request{Key: key})
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			got := calls{counter.Op("GetItem"), counter.Op("PutItem"), int(counter.Total())}
			if d.Allowed != wantAllowed || got != want {
				t.Errorf("%s: allowed %v, calls %+v, want %v, %+v", what, d.Allowed, got, wantAllowed, want)
			}
		}
		one := calls{1, 1, 2}
		check("uncached, new key", uncached, "u", true, one)
		check("uncached, known key", uncached, "u", true, one)
		check("uncached, same instant", uncached, "u", true, one)

		check("cached, first", cached, "c", true, one)
		check("cached, hot", cached, "c", true, calls{})
		clk.Add(999 * time.Millisecond)
		check("cached, still hot", cached, "c", true, calls{})
		clk.Add(time.Millisecond)
		check("cached, sync due", cached, "c", true, one)
		check("cached, hot again", cached, "c", true, calls{})
		check("cached, denied locally", cached, "c", false, calls{})

		// A denial read from the KV changes nothing, so nothing is written.
		for range 2 {
			check("uncached, spending", uncached, "u", true, one)
		}
		check("uncached, denied", uncached, "u", false, calls{1, 0, 1})
	})
}

// TestDynamoDBSingleClientExact runs the step tables against the real
// servers: one client sees exact token-bucket behaviour, cached or not.
func TestDynamoDBSingleClientExact(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		clk := newClock(t0)
		kv, _, _, _ := dynamoKV(t, srv, clk.Now)
		for _, noCache := range []bool{false, true} {
			for ti, tc := range stepTables {
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

func (f *fakeDynamo) PutItem(ctx context.Context, _ *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	f.sawCtx = ctx
	return &dynamodb.PutItemOutput{}, f.err
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
			_, _, gerr := kv.Get(cctx, "p#k", Eventual)
			if f.sawCtx != cctx {
				t.Error("Get did not pass its ctx to the SDK")
			}
			perr := kv.Put(cctx, "p#k", State{}, time.Second)
			if f.sawCtx != cctx {
				t.Error("Put did not pass its ctx to the SDK")
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

	exp := &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Unix()+3600, 10)}
	for _, tc := range []struct {
		name string
		item map[string]types.AttributeValue
	}{
		{"no expires_at", map[string]types.AttributeValue{AttrTokens: &types.AttributeValueMemberN{Value: "1"}}},
		{"no tokens", map[string]types.AttributeValue{ddb.AttrExpiresAt: exp, AttrAt: &types.AttributeValueMemberN{Value: "1"}}},
		{"no at", map[string]types.AttributeValue{ddb.AttrExpiresAt: exp, AttrTokens: &types.AttributeValueMemberN{Value: "1"}}},
		{"tokens a string", map[string]types.AttributeValue{ddb.AttrExpiresAt: exp, AttrTokens: &types.AttributeValueMemberS{Value: "1"}, AttrAt: &types.AttributeValueMemberN{Value: "1"}}},
		{"fraction", map[string]types.AttributeValue{ddb.AttrExpiresAt: exp, AttrTokens: &types.AttributeValueMemberN{Value: "1.5"}, AttrAt: &types.AttributeValueMemberN{Value: "1"}}},
		{"overflow", map[string]types.AttributeValue{ddb.AttrExpiresAt: exp, AttrTokens: &types.AttributeValueMemberN{Value: "1e40"}, AttrAt: &types.AttributeValueMemberN{Value: "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, _ := NewDynamoDB(DynamoDBConfig{Client: &fakeDynamo{getOut: &dynamodb.GetItemOutput{Item: tc.item}}, Table: "t"})
			if _, _, err := kv.Get(ctx, "p#k", Eventual); !errors.Is(err, ErrBadItem) {
				t.Errorf("Get = %v, want ErrBadItem", err)
			}
		})
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

func (f *throttlingDynamo) PutItem(_ context.Context, _ *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
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
			if err := kv.Put(ctx, "p#k", State{}, time.Second); !errors.Is(err, ErrThrottled) {
				t.Errorf("Put = %v, want ErrThrottled", err)
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
