// Package dynamostore keeps the per-key overrides of package overrides in
// the strategies' DynamoDB table (ARCHITECTURE.md, Data model: partition
// key pk, TTL attribute expires_at), so that every instance reads what an
// operator set. One item per policy and hashed client key:
//
//	pk         "ovr#<policy>#<keyhash>"
//	limit      N   (absent: the policy's; 0: the key is blocked)
//	window_ms  N   (absent: the policy's)
//	burst      N   (absent: the policy's)
//	until_ms   N   the override's end, epoch milliseconds (absent: none)
//	expires_at N   until_ms in seconds, rounded up, for TTL deletion
//
// A read is one strongly consistent GetItem, so an instance's view is never
// older than its cache's staleness (the engine reads each key at most once
// per override_staleness); a write is one PutItem or DeleteItem. The key is
// the engine's keyed hash: the table never holds a raw API key or address.
package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// API is the part of the DynamoDB client the store calls, normally a
// *dynamodb.Client.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Config configures a Store.
type Config struct {
	// Client is the DynamoDB client. Required.
	Client API
	// Table is the strategies' table. Required.
	Table string
	// Now is the clock of expiries; default time.Now.
	Now func() time.Time
}

// ErrConfig reports a Config that cannot work.
var ErrConfig = errors.New("dynamostore: bad config")

// Store is an edgelimit.OverrideStore on DynamoDB.
type Store struct {
	client API
	table  *string
	now    func() time.Time
}

// New validates cfg and returns a Store.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Config.Client is required", ErrConfig)
	}
	if cfg.Table == "" {
		return nil, fmt.Errorf("%w: Config.Table is required", ErrConfig)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Store{client: cfg.Client, table: aws.String(cfg.Table), now: now}, nil
}

func pk(pol, key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "ovr#" + pol + "#" + key}}
}

// Override reads the override of the hashed key under policy.
func (s *Store) Override(ctx context.Context, pol, key string) (policy.Limits, bool, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: s.table, Key: pk(pol, key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return policy.Limits{}, false, fmt.Errorf("dynamostore: reading an override: %w", err)
	}
	if len(out.Item) == 0 {
		return policy.Limits{}, false, nil
	}
	var l policy.Limits
	var bad error
	num := func(name string) int64 {
		v, ok := out.Item[name].(*types.AttributeValueMemberN)
		if !ok {
			return 0
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil || n < 0 {
			bad = fmt.Errorf("dynamostore: override item has a bad %s", name)
		}
		return n
	}
	l.Limit, l.Window, l.Burst = num("limit"), time.Duration(num("window_ms"))*time.Millisecond, num("burst")
	if _, ok := out.Item["limit"]; ok && l.Limit == 0 {
		l.Block = true
	}
	until := num("until_ms")
	if bad != nil {
		return policy.Limits{}, false, bad
	}
	// TTL deletion is lazy: an expired item is absent.
	if until > 0 && s.now().UnixMilli() >= until {
		return policy.Limits{}, false, nil
	}
	if l.IsZero() {
		return policy.Limits{}, false, nil
	}
	return l, true, nil
}

// SetOverride writes the override of the hashed key under policy.
func (s *Store) SetOverride(ctx context.Context, pol, key string, l policy.Limits, until time.Time) error {
	item := pk(pol, key)
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	switch {
	case l.Block:
		item["limit"] = n(0)
	case l.Limit > 0:
		item["limit"] = n(l.Limit)
	}
	if l.Window > 0 {
		item["window_ms"] = n(l.Window.Milliseconds())
	}
	if l.Burst > 0 {
		item["burst"] = n(l.Burst)
	}
	if !until.IsZero() {
		ms := until.UnixMilli()
		item["until_ms"] = n(ms)
		item["expires_at"] = n((ms + 999) / 1000)
	}
	if _, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: s.table, Item: item}); err != nil {
		return fmt.Errorf("dynamostore: writing an override: %w", err)
	}
	return nil
}

// DeleteOverride removes the override of the hashed key under policy.
func (s *Store) DeleteOverride(ctx context.Context, pol, key string) error {
	if _, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: s.table, Key: pk(pol, key)}); err != nil {
		return fmt.Errorf("dynamostore: removing an override: %w", err)
	}
	return nil
}

var _ edgelimit.OverrideStore = (*Store)(nil)
