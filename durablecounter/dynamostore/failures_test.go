package dynamostore_test

import (
	"context"
	"errors"
	"net"
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
	"github.com/edgelimit/edgelimit/policy"
)

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

// TestDenialReadFails: when the failed condition came without the old item
// and the read after it fails, an exact algorithm (fixed window) still
// denies, with the quota unknown; the others, whose condition may also fail
// because this instance's view is out of date, report the store error (the
// engine applies on_store_error) rather than guess.
func TestDenialReadFails(t *testing.T) {
	for _, alg := range durablecounter.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			f := &fakeDynamo{
				update: func(context.Context, *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
					return nil, conditionFailed(nil) // dynalite: no ALL_OLD
				},
				get: func(context.Context, *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
					return nil, errors.New("connection reset")
				},
			}
			f.t = t
			store, err := dynamostore.New(dynamostore.Config{Client: f, Table: "tbl"})
			if err != nil {
				t.Fatal(err)
			}
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &policy.Policy{Name: "p", Limit: 10, Window: time.Hour, Options: &durablecounter.Options{Algorithm: alg}},
				Store:  store, Now: func() time.Time { return t0 },
			})
			if err != nil {
				t.Fatal(err)
			}
			d, err := c.Allow(context.Background(), edgelimit.Request{Key: "k", Cost: 3})
			if alg == durablecounter.FixedWindow {
				if err != nil || d.Allowed || d.Remaining != 0 {
					t.Errorf("Allow = %+v, %v; want a denial with Remaining 0", d, err)
				}
				return
			}
			if err == nil {
				t.Errorf("Allow = %+v, nil; want the read's error", d)
			}
		})
	}
}

// decideOnly is a client with DynamoAPI's methods only, as a function's
// role grants them.
type decideOnly struct{ dynamostore.DynamoAPI }

// TestResetNeedsOperatorAPI: a reset deletes items, which the functions'
// clients need not be able to do; a store whose client cannot is refused
// with ErrConfig, not a panic or a silent success.
func TestResetNeedsOperatorAPI(t *testing.T) {
	f := &fakeDynamo{t: t}
	store, err := dynamostore.New(dynamostore.Config{Client: decideOnly{f}, Table: "tbl"})
	if err != nil {
		t.Fatal(err)
	}
	c := newCounter(t, store, "paid", 5, time.Hour)
	err = c.Reset(context.Background(), edgelimit.Request{Key: "k", At: t0})
	if !errors.Is(err, durablecounter.ErrConfig) || !strings.Contains(err.Error(), "OperatorAPI") {
		t.Fatalf("Reset with a decide-only client: %v, want ErrConfig naming OperatorAPI", err)
	}
	if n := f.n("DeleteItem"); n != 0 {
		t.Errorf("DeleteItem called %d times", n)
	}
}
