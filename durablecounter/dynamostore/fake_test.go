package dynamostore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/policy"
)

// fakeDynamo stands in for the DynamoDB client on error paths. Each hook
// left nil fails the test when called.
type fakeDynamo struct {
	t        *testing.T
	update   func(ctx context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
	get      func(ctx context.Context, in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
	batchGet func(ctx context.Context, in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error)
	transact func(ctx context.Context, in *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error)
	del      func(ctx context.Context, in *dynamodb.DeleteItemInput) (*dynamodb.DeleteItemOutput, error)

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
	if pk, ok := in.Key["pk"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(pk.Value, "grant#") && strings.HasSuffix(pk.Value, "#") {
		// The policy's grant marker, read on the way to a denial: none.
		f.count("GetItem(marker)")
		return &dynamodb.GetItemOutput{}, nil
	}
	f.count("GetItem")
	if f.get == nil {
		f.t.Fatal("unexpected GetItem")
	}
	return f.get(ctx, in)
}

func (f *fakeDynamo) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	f.count("DeleteItem")
	if f.del == nil {
		f.t.Fatal("unexpected DeleteItem")
	}
	return f.del(ctx, in)
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
		Policy: &policy.Policy{Name: name, Limit: limit, Window: window},
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

func TestNewValidates(t *testing.T) {
	f := &fakeDynamo{t: t}
	for _, cfg := range []dynamostore.Config{
		{Table: "t"},
		{Client: f},
		{Client: f, Table: "t", ExpiryMargin: -time.Second},
		{Client: f, Table: "t", Transactions: 9},
	} {
		if _, err := dynamostore.New(cfg); !errors.Is(err, durablecounter.ErrConfig) {
			t.Errorf("dynamostore.New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}
