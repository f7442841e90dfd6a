package kvbucket

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit/internal/ddb"
)

// Attribute names of a bucket item, next to ddb.AttrPK and ddb.AttrExpiresAt.
const (
	// AttrTokens holds State.Tokens (nanotokens).
	AttrTokens = "tokens"
	// AttrAt holds State.At (Unix nanoseconds).
	AttrAt = "at"
)

// ItemPrefix starts the partition key of every kvbucket item:
// "kv#<policy>#<keyhash>".
const ItemPrefix = "kv#"

// maxTTL caps an item's lifetime (ten years), keeping expires_at sane for
// buckets that take longer than that to refill.
const maxTTL = 10 * 365 * 24 * time.Hour

// DynamoDBAPI is the part of *dynamodb.Client that DynamoDB uses.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// DynamoDBConfig configures NewDynamoDB.
type DynamoDBConfig struct {
	// Client calls DynamoDB. Required: a *dynamodb.Client from
	// internal/ddb.NewClient, or a fake for error paths.
	Client DynamoDBAPI
	// Table is the edgelimit table (partition key pk, TTL on expires_at),
	// shared with the durable strategy. Required.
	Table string
	// Now is the clock that sets and checks expires_at; default time.Now.
	Now func() time.Time
	// RetryBackoff caps how long the SDK waits before it retries a failed
	// call (throttling, a dropped connection), so that its retries fit in
	// the policy's store_timeout (default 100 ms) instead of outlasting it:
	// the SDK's own back-off is up to seconds (up to 20 s). Retries stay
	// bounded by the client's attempts (4 for a DynamoDB client by default,
	// so 3 back-offs) and by the engine's time budget: a throttled call
	// fails after its attempts, well inside the budget, instead of waiting
	// the budget out. Default DefaultRetryBackoff (10 ms, as durablecounter's
	// DynamoConfig); negative leaves the client's retryer as it is.
	RetryBackoff time.Duration
}

// DefaultRetryBackoff is DynamoDBConfig.RetryBackoff's default.
const DefaultRetryBackoff = 10 * time.Millisecond

// DynamoDB is a KV on one DynamoDB table: one item per bucket, read with an
// eventually consistent GetItem (strongly consistent when asked) and
// written with an unconditional PutItem (last writer wins). Items carry expires_at, so the table's TTL deletes
// idle buckets; a reader treats an item past its expires_at as absent,
// since TTL deletion is lazy.
type DynamoDB struct {
	client DynamoDBAPI
	table  *string
	now    func() time.Time
	// opts go with every call (the capped retry back-off).
	opts []func(*dynamodb.Options)
}

var _ KV = (*DynamoDB)(nil)

// NewDynamoDB checks cfg and returns the KV.
func NewDynamoDB(cfg DynamoDBConfig) (*DynamoDB, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: DynamoDBConfig.Client is required", ErrBadConfig)
	}
	if cfg.Table == "" {
		return nil, fmt.Errorf("%w: DynamoDBConfig.Table is required", ErrBadConfig)
	}
	d := &DynamoDB{client: cfg.Client, table: aws.String(cfg.Table), now: cfg.Now}
	if d.now == nil {
		d.now = time.Now
	}
	backoff := cfg.RetryBackoff
	if backoff == 0 {
		backoff = DefaultRetryBackoff
	}
	if backoff > 0 {
		d.opts = []func(*dynamodb.Options){func(o *dynamodb.Options) {
			if o.Retryer != nil {
				o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, backoff)
			}
		}}
	}
	return d, nil
}

// Get reads the item of key: eventually consistent unless c is Strong.
func (d *DynamoDB) Get(ctx context.Context, key string, c Consistency) (State, bool, error) {
	pk := ItemPrefix + key
	out, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      d.table,
		Key:            map[string]types.AttributeValue{ddb.AttrPK: &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead: aws.Bool(c == Strong),
	}, d.opts...)
	if err != nil {
		return State{}, false, d.wrap("GetItem", pk, err)
	}
	if out == nil || len(out.Item) == 0 {
		return State{}, false, nil
	}
	exp, err := number(out.Item, ddb.AttrExpiresAt)
	if err != nil {
		return State{}, false, fmt.Errorf("kvbucket: GetItem %q: %w", pk, err)
	}
	if exp <= d.now().Unix() {
		return State{}, false, nil // expired, not yet deleted
	}
	var s State
	if s.Tokens, err = number(out.Item, AttrTokens); err == nil {
		s.At, err = number(out.Item, AttrAt)
	}
	if err != nil {
		return State{}, false, fmt.Errorf("kvbucket: GetItem %q: %w", pk, err)
	}
	return s, true, nil
}

// Put writes the item of key unconditionally, to expire ttl from now
// (rounded up to whole seconds, as the TTL attribute counts).
func (d *DynamoDB) Put(ctx context.Context, key string, s State, ttl time.Duration) error {
	pk := ItemPrefix + key
	ttl = min(max(ttl, 0), maxTTL)
	exp := d.now().Add(ttl + time.Second - 1).Unix()
	_, err := d.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: d.table,
		Item: map[string]types.AttributeValue{
			ddb.AttrPK:        &types.AttributeValueMemberS{Value: pk},
			AttrTokens:        &types.AttributeValueMemberN{Value: strconv.FormatInt(s.Tokens, 10)},
			AttrAt:            &types.AttributeValueMemberN{Value: strconv.FormatInt(s.At, 10)},
			ddb.AttrExpiresAt: &types.AttributeValueMemberN{Value: strconv.FormatInt(exp, 10)},
		},
	}, d.opts...)
	if err != nil {
		return d.wrap("PutItem", pk, err)
	}
	return nil
}

func (d *DynamoDB) wrap(op, pk string, err error) error {
	if ddb.IsThrottle(err) {
		return fmt.Errorf("kvbucket: %s %q: %w: %w", op, pk, ErrThrottled, err)
	}
	return fmt.Errorf("kvbucket: %s %q: %w", op, pk, err)
}

// number reads an integer N attribute.
func number(item map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("%w: attribute %s is missing or not a number", ErrBadItem, name)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: attribute %s = %.32q is not a 64-bit integer", ErrBadItem, name, v.Value)
	}
	return n, nil
}
