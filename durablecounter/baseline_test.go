package durablecounter_test

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
)

// readThenWrite is the design the issue measures ours against, and what
// most DynamoDB rate limiters do today: read the count (strongly
// consistent), decide, then write the new count under a version check, and
// start again on a version conflict, up to retries times. Fixed window,
// one item per key and window, like ours. It is test code, the baseline of
// TestDynamoCallsPerDecision and TestReadThenWriteContention.
type readThenWrite struct {
	client  *dynamodb.Client
	table   string
	limit   int64
	window  time.Duration
	retries int
	now     func() time.Time
}

// errConflictsExhausted is the baseline's denial for losing every race:
// the quota may have room, but the request is denied (spuriously).
var errConflictsExhausted = errors.New("baseline: version conflicts exhausted")

// allow returns whether the request was admitted; errConflictsExhausted
// when it lost more races than its retries.
func (b *readThenWrite) allow(ctx context.Context, key string) (bool, error) {
	ws := b.now().Truncate(b.window)
	pk := "rtw#" + key + "#" + strconv.FormatInt(ws.Unix(), 10)
	keyAttr := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
	for attempt := 0; ; attempt++ {
		out, err := b.client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(b.table), Key: keyAttr, ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return false, err
		}
		n, v := int64(0), int64(0)
		if a, ok := out.Item["n"].(*types.AttributeValueMemberN); ok {
			n, _ = strconv.ParseInt(a.Value, 10, 64)
		}
		if a, ok := out.Item["v"].(*types.AttributeValueMemberN); ok {
			v, _ = strconv.ParseInt(a.Value, 10, 64)
		}
		if n+1 > b.limit {
			return false, nil // full: denied without a write
		}
		cond := "v = :v"
		if v == 0 {
			cond = "attribute_not_exists(v)"
		}
		values := map[string]types.AttributeValue{
			":n1": num(n + 1), ":v1": num(v + 1), ":e": num(ws.Add(b.window).Unix() + 60),
		}
		if v != 0 {
			values[":v"] = num(v)
		}
		_, err = b.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(b.table),
			Key:                       keyAttr,
			UpdateExpression:          aws.String("SET n = :n1, v = :v1, expires_at = :e"),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeValues: values,
		})
		if err == nil {
			return true, nil
		}
		var cf *types.ConditionalCheckFailedException
		if !errors.As(err, &cf) {
			return false, err
		}
		if attempt == b.retries {
			return false, errConflictsExhausted
		}
	}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// decisionOf adapts the baseline to a Decision-shaped answer for tables.
func (b *readThenWrite) decide(ctx context.Context, key string) (edgelimit.Decision, error) {
	ok, err := b.allow(ctx, key)
	if errors.Is(err, errConflictsExhausted) {
		err = nil
	}
	return edgelimit.Decision{Allowed: ok}, err
}
