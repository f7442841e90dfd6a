package durablecounter_test

import (
	"context"
	"errors"
	"net"
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
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddb"
)

// fakeDynamo stands in for the DynamoDB client on error paths. Each hook
// left nil fails the test when called.
type fakeDynamo struct {
	t        *testing.T
	update   func(ctx context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
	get      func(ctx context.Context, in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
	batchGet func(ctx context.Context, in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error)
	transact func(ctx context.Context, in *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error)

	mu    sync.Mutex
	calls map[string]int
}

func (f *fakeDynamo) count(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
}

func (f *fakeDynamo) n(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *fakeDynamo) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.count("UpdateItem")
	if f.update == nil {
		f.t.Fatalf("unexpected UpdateItem %s", aws.ToString(in.UpdateExpression))
	}
	return f.update(ctx, in)
}

func (f *fakeDynamo) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.count("GetItem")
	if f.get == nil {
		f.t.Fatal("unexpected GetItem")
	}
	return f.get(ctx, in)
}

func (f *fakeDynamo) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	f.count("BatchGetItem")
	if f.batchGet == nil {
		f.t.Fatal("unexpected BatchGetItem")
	}
	return f.batchGet(ctx, in)
}

func (f *fakeDynamo) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	f.count("TransactWriteItems")
	if f.transact == nil {
		f.t.Fatal("unexpected TransactWriteItems")
	}
	return f.transact(ctx, in)
}

var (
	// t0 is a fixed instant; its 1h window starts at 1699999200 and ends at 1700002800.
	t0 = time.Unix(1_700_000_000, 0)
	// pk0 is the item of key "k" for policy "paid" at t0.
	pk0 = "fw#paid#k#1699999200"
)

func fakeCounter(t *testing.T, f *fakeDynamo, limit int64, mode dynamostore.TransactionMode) (*durablecounter.Counter, *dynamostore.Store) {
	t.Helper()
	f.t = t
	store, err := dynamostore.New(dynamostore.Config{Client: f, Table: "tbl", Transactions: mode})
	if err != nil {
		t.Fatal(err)
	}
	c := newCounter(t, store, "paid", limit, time.Hour)
	return c, store
}

func newCounter(t *testing.T, store durablecounter.Store, name string, limit int64, window time.Duration) *durablecounter.Counter {
	t.Helper()
	c, err := durablecounter.New(durablecounter.Config{
		Policy: &edgelimit.Policy{Name: name, Limit: limit, Window: window},
		Store:  store,
		Now:    func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func item(n int64, expiresAt int64) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"n":          &types.AttributeValueMemberN{Value: itoa(n)},
		"expires_at": &types.AttributeValueMemberN{Value: itoa(expiresAt)},
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func updated(n int64) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{Attributes: item(n, 1_700_002_860)}, nil
}

func conditionFailed(old map[string]types.AttributeValue) error {
	return &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed"), Item: old}
}

func pkOf(key map[string]types.AttributeValue) string {
	return key[ddb.AttrPK].(*types.AttributeValueMemberS).Value
}

func numOf(t *testing.T, v types.AttributeValue) string {
	t.Helper()
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("%T is not a number", v)
	}
	return n.Value
}

func TestUpdateItemRequest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cost     int64
		wantCond string
		wantMax  string
	}{
		{"fits", 3, "attribute_not_exists(n) OR n <= :m", "7"},
		{"cost above limit never fits", 11, "n <= :m", "-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *dynamodb.UpdateItemInput
			f := &fakeDynamo{update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				got = in
				return updated(tc.cost)
			}}
			c, _ := fakeCounter(t, f, 10, dynamostore.TransactionsAuto)
			if _, err := c.Allow(context.Background(), edgelimit.Request{Key: "k", Cost: tc.cost}); err != nil {
				t.Fatal(err)
			}
			if pk := pkOf(got.Key); pk != pk0 {
				t.Errorf("pk = %q, want %q", pk, pk0)
			}
			if e := aws.ToString(got.UpdateExpression); e != "ADD n :d SET expires_at = :e" {
				t.Errorf("UpdateExpression = %q", e)
			}
			if c := aws.ToString(got.ConditionExpression); c != tc.wantCond {
				t.Errorf("ConditionExpression = %q, want %q", c, tc.wantCond)
			}
			vals := got.ExpressionAttributeValues
			// expires_at: window end (1700002800) plus the default 1m margin.
			if d, m, e := numOf(t, vals[":d"]), numOf(t, vals[":m"]), numOf(t, vals[":e"]); d != itoa(tc.cost) || m != tc.wantMax || e != "1700002860" {
				t.Errorf(":d, :m, :e = %s, %s, %s; want %d, %s, 1700002860", d, m, e, tc.cost, tc.wantMax)
			}
			if got.ReturnValues != types.ReturnValueUpdatedNew || got.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
				t.Errorf("ReturnValues %q, ReturnValuesOnConditionCheckFailure %q; want UPDATED_NEW, ALL_OLD", got.ReturnValues, got.ReturnValuesOnConditionCheckFailure)
			}
			if aws.ToString(got.TableName) != "tbl" {
				t.Errorf("TableName = %q", aws.ToString(got.TableName))
			}
		})
	}
}

func TestSubSecondWindowKey(t *testing.T) {
	var pk string
	f := &fakeDynamo{t: t, update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		pk = pkOf(in.Key)
		return updated(1)
	}}
	store, _ := dynamostore.New(dynamostore.Config{Client: f, Table: "tbl"})
	c := newCounter(t, store, "fast", 5, 1500*time.Millisecond)
	if _, err := c.Allow(context.Background(), edgelimit.Request{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	// 1700000000 s falls in the 1.5 s window starting at 1699999999.5 s:
	// sub-second windows are keyed in milliseconds.
	if want := "fw#fast#k#1699999999500"; pk != want {
		t.Errorf("pk = %q, want %q", pk, want)
	}
}

func TestDenialWithoutOldItem(t *testing.T) {
	// dynalite ignores ReturnValuesOnConditionCheckFailure: the failure
	// carries no item.
	for _, tc := range []struct {
		name          string
		cost          int64
		read          func(context.Context, *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
		wantReads     int
		wantRemaining int64
	}{
		{name: "cost 1 needs no read", cost: 1, wantReads: 0, wantRemaining: 0},
		{name: "cost 3 reads once", cost: 3, wantReads: 1, wantRemaining: 2,
			read: func(_ context.Context, in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				if !aws.ToBool(in.ConsistentRead) || pkOf(in.Key) != pk0 {
					t.Errorf("GetItem(%q, consistent %v), want a consistent read of %q", pkOf(in.Key), aws.ToBool(in.ConsistentRead), pk0)
				}
				return &dynamodb.GetItemOutput{Item: item(8, 1_700_002_860)}, nil
			}},
		{name: "a later refund is clamped", cost: 3, wantReads: 1, wantRemaining: 2,
			read: func(context.Context, *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				return &dynamodb.GetItemOutput{Item: item(1, 1_700_002_860)}, nil
			}},
		{name: "expired item counts zero", cost: 3, wantReads: 1, wantRemaining: 2,
			read: func(context.Context, *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				return &dynamodb.GetItemOutput{Item: item(9, 1_699_999_000)}, nil
			}},
		{name: "a failed read keeps the denial", cost: 3, wantReads: 1, wantRemaining: 0,
			read: func(context.Context, *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				return nil, errors.New("connection reset")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDynamo{
				update: func(context.Context, *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
					return nil, conditionFailed(nil)
				},
				get: tc.read,
			}
			c, _ := fakeCounter(t, f, 10, dynamostore.TransactionsAuto)
			d, err := c.Allow(context.Background(), edgelimit.Request{Key: "k", Cost: tc.cost})
			if err != nil {
				t.Fatalf("Allow: %v", err)
			}
			want := edgelimit.Decision{Policy: "paid", Limit: 10, Window: time.Hour, Remaining: tc.wantRemaining,
				Reset: 2800 * time.Second, RetryAfter: 2800 * time.Second}
			if d != want {
				t.Errorf("Allow(cost %d) = %+v, want %+v", tc.cost, d, want)
			}
			if n := f.n("GetItem"); n != tc.wantReads {
				t.Errorf("GetItem calls = %d, want %d", n, tc.wantReads)
			}
		})
	}
}

func TestDenialWithOldItem(t *testing.T) {
	f := &fakeDynamo{update: func(context.Context, *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return nil, conditionFailed(item(9, 1_700_002_860))
	}}
	c, _ := fakeCounter(t, f, 10, dynamostore.TransactionsAuto)
	d, err := c.Allow(context.Background(), edgelimit.Request{Key: "k", Cost: 3})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Remaining != 1 {
		t.Errorf("Allow(cost 3) with 9 of 10 spent = %+v, want denied with Remaining 1", d)
	}
	if n := f.n("GetItem"); n != 0 {
		t.Errorf("GetItem calls = %d, want 0: ALL_OLD carried the count", n)
	}
}

func TestStoreErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		ctx    func() (context.Context, context.CancelFunc)
		checks func(t *testing.T, err error)
	}{
		{
			name: "provisioned throughput exceeded",
			err:  &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")},
			checks: func(t *testing.T, err error) {
				if !errors.Is(err, durablecounter.ErrThrottled) || !ddb.IsThrottle(err) {
					t.Errorf("err = %v, want ErrThrottled wrapping the SDK error", err)
				}
			},
		},
		{
			name: "throttling exception",
			err:  &smithy.GenericAPIError{Code: "ThrottlingException", Message: "rate exceeded"},
			checks: func(t *testing.T, err error) {
				if !errors.Is(err, durablecounter.ErrThrottled) {
					t.Errorf("err = %v, want ErrThrottled", err)
				}
			},
		},
		{
			name: "deadline",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithDeadline(context.Background(), t0) // long past
			},
			checks: func(t *testing.T, err error) {
				if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, durablecounter.ErrThrottled) {
					t.Errorf("err = %v, want context.DeadlineExceeded and not ErrThrottled", err)
				}
			},
		},
		{
			name: "internal server error",
			err:  &types.InternalServerError{Message: aws.String("oops")},
			checks: func(t *testing.T, err error) {
				var ise *types.InternalServerError
				if !errors.As(err, &ise) {
					t.Errorf("err = %v, want the SDK's InternalServerError", err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDynamo{update: func(ctx context.Context, _ *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				if tc.err != nil {
					return nil, tc.err
				}
				<-ctx.Done() // a hung server: only the context ends the call
				return nil, ctx.Err()
			}}
			c, _ := fakeCounter(t, f, 10, dynamostore.TransactionsAuto)
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.ctx != nil {
				ctx, cancel = tc.ctx()
			}
			defer cancel()
			d, err := c.Allow(ctx, edgelimit.Request{Key: "k"})
			if err == nil {
				t.Fatalf("Allow = %+v, nil; want an error", d)
			}
			if !strings.HasPrefix(err.Error(), "durablecounter: update \""+pk0+"\": ") {
				t.Errorf("err = %q, want it to name the operation and item", err)
			}
			tc.checks(t, err)
		})
	}
}

// TestHungServer points a real SDK client at a listener that accepts
// connections and never answers: the call must end with the caller's
// deadline, because the Counter passes ctx straight to the SDK.
func TestHungServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c) // read nothing, answer nothing
			mu.Unlock()
		}
	})
	defer func() {
		ln.Close()
		conns.Wait()
		for _, c := range open {
			c.Close()
		}
	}()
	client, err := ddb.NewClient(context.Background(), ddb.ClientOptions{Endpoint: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: "tbl"})
	if err != nil {
		t.Fatal(err)
	}
	c := newCounter(t, store, "paid", 10, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if d, err := c.Allow(ctx, edgelimit.Request{Key: "k"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Allow against a hung server = %+v, %v; want context.DeadlineExceeded", d, err)
	}
}

func TestMalformedReply(t *testing.T) {
	f := &fakeDynamo{update: func(context.Context, *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return &dynamodb.UpdateItemOutput{}, nil // no attributes
	}}
	c, _ := fakeCounter(t, f, 10, dynamostore.TransactionsAuto)
	if d, err := c.Allow(context.Background(), edgelimit.Request{Key: "k"}); err == nil {
		t.Errorf("Allow with a reply without n = %+v, nil; want an error", d)
	}
}

func TestRefundRequest(t *testing.T) {
	var got *dynamodb.UpdateItemInput
	fail := error(nil)
	refunds := 0
	f := &fakeDynamo{update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		if strings.HasPrefix(aws.ToString(in.UpdateExpression), "ADD n :d") { // the Allow
			return &dynamodb.UpdateItemOutput{Attributes: item(2, 1_700_002_860)}, nil
		}
		got = in
		refunds++
		return &dynamodb.UpdateItemOutput{}, fail
	}}
	c, _ := fakeCounter(t, f, 10, dynamostore.TransactionsAuto)
	req := edgelimit.Request{Key: "k", Cost: 2}
	d, err := c.Allow(context.Background(), req)
	if err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	// A decision that spent nothing has nothing to refund: no call.
	for _, nothing := range []edgelimit.Decision{{}, {Allowed: true}, {Allowed: false, Receipt: d.Receipt}} {
		if err := c.Refund(context.Background(), req, nothing); err != nil || refunds != 0 {
			t.Errorf("Refund(%+v) = %v after %d calls, want nil and no call", nothing, err, refunds)
		}
	}
	if err := c.Refund(context.Background(), req, d); err != nil {
		t.Fatal(err)
	}
	if pk := pkOf(got.Key); pk != pk0 {
		t.Errorf("refund of %s, want the item of the decision's window %s", pk, pk0)
	}
	if e, cond := aws.ToString(got.UpdateExpression), aws.ToString(got.ConditionExpression); e != "ADD n :r" || cond != "n >= :d" {
		t.Errorf("refund = %q if %q, want \"ADD n :r\" if \"n >= :d\"", e, cond)
	}
	if r, d := numOf(t, got.ExpressionAttributeValues[":r"]), numOf(t, got.ExpressionAttributeValues[":d"]); r != "-2" || d != "2" {
		t.Errorf(":r, :d = %s, %s; want -2, 2", r, d)
	}
	fail = conditionFailed(nil)
	refunds = 0
	if err := c.Refund(context.Background(), req, d); err != nil || refunds != 1 {
		t.Errorf("Refund with nothing to give back = %v after %d calls, want nil after 1", err, refunds)
	}
	// A call that fails is retried (within the context), then reported:
	// a refund is never dropped silently.
	fail = &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
	refunds = 0
	if err := c.Refund(context.Background(), req, d); !errors.Is(err, durablecounter.ErrThrottled) || refunds < 2 {
		t.Errorf("Refund when throttled = %v after %d calls, want ErrThrottled after retries", err, refunds)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	refunds = 0
	if err := c.Refund(ctx, req, d); err == nil || refunds != 1 {
		t.Errorf("Refund when throttled with the context done = %v after %d calls, want an error after 1", err, refunds)
	}
}

// batchPair returns two Counters on one fake store.
func batchPair(t *testing.T, f *fakeDynamo, mode dynamostore.TransactionMode) (a, b *durablecounter.Counter) {
	t.Helper()
	a, store := fakeCounter(t, f, 10, mode)
	return a, newCounter(t, store, "burst", 2, time.Hour)
}

func batchOf(a, b *durablecounter.Counter) []edgelimit.BatchItem {
	return []edgelimit.BatchItem{
		{Limiter: a, Request: edgelimit.Request{Key: "k"}},
		{Limiter: b, Request: edgelimit.Request{Key: "k"}},
	}
}

func countsReply(in *dynamodb.BatchGetItemInput, counts map[string]int64) *dynamodb.BatchGetItemOutput {
	out := &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{}}
	for table, ka := range in.RequestItems {
		for _, k := range ka.Keys {
			pk := pkOf(k)
			if n, ok := counts[pk]; ok {
				it := item(n, 1_700_002_860)
				it[ddb.AttrPK] = &types.AttributeValueMemberS{Value: pk}
				out.Responses[table] = append(out.Responses[table], it)
			}
		}
	}
	return out
}

func TestTransactionDenied(t *testing.T) {
	var read []string
	f := &fakeDynamo{
		transact: func(_ context.Context, in *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
			for _, it := range in.TransactItems {
				if it.Update.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
					t.Errorf("transaction item without ALL_OLD")
				}
			}
			return nil, &types.TransactionCanceledException{
				Message: aws.String("Transaction cancelled"),
				CancellationReasons: []types.CancellationReason{
					{Code: aws.String("None")},
					{Code: aws.String("ConditionalCheckFailed"), Item: item(2, 1_700_002_860)},
				},
			}
		},
		batchGet: func(_ context.Context, in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
			for _, ka := range in.RequestItems {
				for _, k := range ka.Keys {
					read = append(read, pkOf(k))
				}
			}
			return countsReply(in, map[string]int64{pk0: 4}), nil
		},
	}
	a, b := batchPair(t, f, dynamostore.TransactionsAuto)
	ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
	if err != nil {
		t.Fatal(err)
	}
	if !ds[0].Allowed || ds[0].Remaining != 6 || ds[1].Allowed || ds[1].Remaining != 0 || ds[1].Policy != "burst" {
		t.Errorf("AllowBatch = %+v, want paid allowed with Remaining 6 (not spent), burst denied", ds)
	}
	if len(read) != 1 || read[0] != pk0 {
		t.Errorf("read %q after the cancellation, want only %q (the other came with ALL_OLD)", read, pk0)
	}
}

func TestTransactionConflictRetried(t *testing.T) {
	attempts := 0
	f := &fakeDynamo{
		transact: func(context.Context, *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
			attempts++
			if attempts == 1 {
				return nil, &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{
					{Code: aws.String("None")}, {Code: aws.String("TransactionConflict")},
				}}
			}
			return &dynamodb.TransactWriteItemsOutput{}, nil
		},
		batchGet: func(_ context.Context, in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
			return countsReply(in, map[string]int64{pk0: 1, "fw#burst#k#1699999200": 1}), nil
		},
	}
	a, b := batchPair(t, f, dynamostore.TransactionsAuto)
	ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 2 || !ds[0].Allowed || ds[0].Remaining != 9 || !ds[1].Allowed || ds[1].Remaining != 1 {
		t.Errorf("after a conflict: %d attempts, %+v; want 2 attempts, both allowed with Remaining 9 and 1", attempts, ds)
	}
}

func TestTransactionsUnsupported(t *testing.T) {
	unknown := &smithy.GenericAPIError{Code: "UnknownOperationException", Message: "unknown operation"}
	newFake := func() *fakeDynamo {
		return &fakeDynamo{
			transact: func(context.Context, *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
				return nil, unknown
			},
			update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				return updated(1)
			},
		}
	}
	t.Run("auto falls back once and for all", func(t *testing.T) {
		f := newFake()
		a, b := batchPair(t, f, dynamostore.TransactionsAuto)
		for range 2 {
			ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
			if err != nil || !ds[0].Allowed || !ds[1].Allowed {
				t.Fatalf("AllowBatch = %+v, %v; want both allowed", ds, err)
			}
		}
		if tx, up := f.n("TransactWriteItems"), f.n("UpdateItem"); tx != 1 || up != 4 {
			t.Errorf("TransactWriteItems %d, UpdateItem %d; want 1 (detection) and 4", tx, up)
		}
	})
	t.Run("required fails", func(t *testing.T) {
		f := newFake()
		a, b := batchPair(t, f, dynamostore.TransactionsRequired)
		if _, err := a.AllowBatch(context.Background(), batchOf(a, b)); !errors.Is(err, durablecounter.ErrNoTransactions) {
			t.Errorf("AllowBatch = %v, want ErrNoTransactions", err)
		}
	})
}

func TestSequentialBatchCompensates(t *testing.T) {
	var ops []string
	f := &fakeDynamo{
		update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			pk := pkOf(in.Key)
			ops = append(ops, aws.ToString(in.UpdateExpression)+" "+pk)
			switch {
			case aws.ToString(in.UpdateExpression) == "ADD n :r":
				return &dynamodb.UpdateItemOutput{}, nil
			case pk == pk0:
				return updated(5)
			}
			return nil, conditionFailed(nil) // dynalite: no ALL_OLD
		},
		get: func(context.Context, *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			return &dynamodb.GetItemOutput{Item: item(2, 1_700_002_860)}, nil
		},
	}
	a, b := batchPair(t, f, dynamostore.TransactionsOff)
	ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ADD n :d SET expires_at = :e " + pk0,
		"ADD n :d SET expires_at = :e fw#burst#k#1699999200",
		"ADD n :r " + pk0, // the compensation
	}
	if strings.Join(ops, "\n") != strings.Join(want, "\n") {
		t.Errorf("updates:\n%s\nwant:\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
	if !ds[0].Allowed || ds[0].Remaining != 6 || ds[1].Allowed {
		t.Errorf("AllowBatch = %+v; want paid allowed with Remaining 6 (its state without the batch), burst denied", ds)
	}
}

func TestCommittedBatchWithFailedRead(t *testing.T) {
	f := &fakeDynamo{
		transact: func(context.Context, *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
			return &dynamodb.TransactWriteItemsOutput{}, nil
		},
		batchGet: func(context.Context, *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
			return nil, errors.New("connection reset")
		},
	}
	a, b := batchPair(t, f, dynamostore.TransactionsAuto)
	ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
	if err != nil {
		t.Fatalf("AllowBatch after a committed transaction = %v; the units are spent, so the decisions must stand", err)
	}
	if !ds[0].Allowed || ds[0].Remaining != 0 || !ds[1].Allowed || ds[1].Remaining != 0 {
		t.Errorf("AllowBatch = %+v, want both allowed, Remaining unknown so reported 0", ds)
	}
}

// TestTransactionDeniedJudgesOnlyUnevaluated: after a cancellation, a
// member the server evaluated as fitting keeps its verdict whatever a later
// read shows, and a member it did not evaluate (a conflict) is judged by the
// count read.
func TestTransactionDeniedJudgesOnlyUnevaluated(t *testing.T) {
	pkBurst := "fw#burst#k#1699999200"
	for _, tc := range []struct {
		name        string
		firstCode   string
		readCount   int64
		wantAllowed bool
		wantRemain  int64
	}{
		{"evaluated and fitting, full by the time of the read", "None", 10, true, 0},
		{"conflict, fits", "TransactionConflict", 4, true, 6},
		{"conflict, full", "TransactionConflict", 10, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDynamo{
				transact: func(context.Context, *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
					return nil, &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{
						{Code: aws.String(tc.firstCode)},
						{Code: aws.String("ConditionalCheckFailed"), Item: item(2, 1_700_002_860)},
					}}
				},
				batchGet: func(_ context.Context, in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
					return countsReply(in, map[string]int64{pk0: tc.readCount, pkBurst: 2}), nil
				},
			}
			a, b := batchPair(t, f, dynamostore.TransactionsAuto)
			ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
			if err != nil {
				t.Fatal(err)
			}
			if ds[0].Allowed != tc.wantAllowed || ds[0].Remaining != tc.wantRemain || ds[1].Allowed {
				t.Errorf("AllowBatch = %+v; want paid {Allowed %v, Remaining %d}, burst denied", ds, tc.wantAllowed, tc.wantRemain)
			}
			if n := f.n("TransactWriteItems"); n != 1 {
				t.Errorf("TransactWriteItems calls = %d, want 1: a condition failed, so no retry", n)
			}
		})
	}
}

// TestUpdateExpressions pins each algorithm's one write, as the package
// documentation shows it: the first decision on a new key (no view), and
// one with a view (the reply to the first).
func TestUpdateExpressions(t *testing.T) {
	for _, tc := range []struct {
		alg              string
		reply            map[string]types.AttributeValue
		first, firstIf   string
		second, secondIf string
	}{
		{
			alg:   string(durablecounter.SlidingWindow),
			reply: map[string]types.AttributeValue{"w": &types.AttributeValueMemberN{Value: "472222"}, "c472222": &types.AttributeValueMemberN{Value: "1"}},
			first: "ADD #c :d SET #w = :i, #a = :te, expires_at = :e REMOVE #s0", firstIf: "(attribute_not_exists(#w) OR #w <= :i) AND (attribute_not_exists(#c) OR #c <= :m) AND (attribute_not_exists(#p) OR #p <= :pg)",
			second: "ADD #c :d SET #w = :i, #a = :te, expires_at = :e REMOVE #s0", secondIf: "(attribute_not_exists(#w) OR #w <= :i) AND (attribute_not_exists(#c) OR #c <= :m) AND (attribute_not_exists(#p) OR #p <= :pg)",
		},
		{
			alg:   string(durablecounter.SlidingLog),
			reply: map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "1"}, "g": &types.AttributeValueMemberN{Value: "42"}, "b" + strconv.FormatInt(t0.UnixMilli()-7200_000, 36): &types.AttributeValueMemberN{Value: "1"}},
			first: "ADD #n :d, #b :d SET #g = if_not_exists(#g, :gn), expires_at = :e", firstIf: "attribute_not_exists(#n) OR #n <= :m",
			// The view shows an expired unit: E = 1, so the condition
			// checks the incarnation and that no refund happened since.
			second: "ADD #n :d, #b :d SET #g = if_not_exists(#g, :gn), expires_at = :e", secondIf: "attribute_not_exists(#n) OR (#n <= :m AND #g = :g0 AND attribute_not_exists(#r))",
		},
		{
			alg:   string(durablecounter.GCRA),
			reply: map[string]types.AttributeValue{"tat": &types.AttributeValueMemberN{Value: strconv.FormatInt(t0.UnixNano()+int64(360*time.Second), 10)}},
			// The idle update records the instant it decided at, and never
			// sets a TAT behind an instant another request was decided at.
			first: "SET #t = :nt, #a = :te, #p = :p, expires_at = :e REMOVE #z", firstIf: "(attribute_not_exists(#t) OR #t <= :te) AND (attribute_not_exists(#a) OR #a <= :te)",
			second: "SET #t = #t + :ct, #a = :te, expires_at = :e", secondIf: "#t > :te AND #t <= :lim",
		},
	} {
		t.Run(tc.alg, func(t *testing.T) {
			var got []*dynamodb.UpdateItemInput
			f := &fakeDynamo{update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				got = append(got, in)
				return &dynamodb.UpdateItemOutput{Attributes: tc.reply}, nil
			}}
			f.t = t
			store, err := dynamostore.New(dynamostore.Config{Client: f, Table: "tbl"})
			if err != nil {
				t.Fatal(err)
			}
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &edgelimit.Policy{Name: "p", Limit: 10, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(tc.alg)}},
				Store:  store, Now: func() time.Time { return t0 },
			})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := c.Allow(context.Background(), edgelimit.Request{Key: "k"}); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != 2 {
				t.Fatalf("%d UpdateItem calls, want 2", len(got))
			}
			for i, want := range [][2]string{{tc.first, tc.firstIf}, {tc.second, tc.secondIf}} {
				if e, c := aws.ToString(got[i].UpdateExpression), aws.ToString(got[i].ConditionExpression); e != want[0] || c != want[1] {
					t.Errorf("update %d: %q if %q, want %q if %q", i+1, e, c, want[0], want[1])
				}
				if got[i].ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
					t.Errorf("update %d without ALL_OLD", i+1)
				}
			}
		})
	}
}
