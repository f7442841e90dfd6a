package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// readThenWrite is the protocol other DynamoDB rate limiters use, built
// here as the baseline: read the window's item (strongly consistent
// GetItem), decide in the client, then write the new count. With
// conditional true the write carries an optimistic-concurrency check on a
// version attribute (PutItem with attribute_not_exists for a new item,
// UpdateItem with v = :v otherwise); a failed check is a conflict, retried
// from the read up to retries times and then answered as a denial. With
// conditional false the write is a blind PutItem (last writer wins).
//
// Items: pk = <prefix><key>#<window start, Unix seconds>, n (count), v
// (version), expires_at. Windows are fixed and aligned to the Unix epoch,
// like durablecounter's fixed window.
type readThenWrite struct {
	client      *dynamodb.Client
	table       string
	prefix      string
	limit       int64
	window      time.Duration
	now         func() time.Time
	conditional bool
	retries     int
	conflicts   atomic.Int64
}

func (r *readThenWrite) decide(ctx context.Context, key string) (bool, error) {
	now := r.now().UnixNano()
	ws := now / int64(r.window) * int64(r.window)
	startSec := ws / int64(time.Second)
	pk := r.prefix + key + "#" + strconv.FormatInt(startSec, 10)
	exp := num(startSec + int64(r.window/time.Second) + 60)
	keyAttr := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
	for attempt := 0; ; attempt++ {
		got, err := r.client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(r.table), Key: keyAttr, ConsistentRead: aws.Bool(true),
			ProjectionExpression: aws.String("n, v"),
		})
		if err != nil {
			return false, fmt.Errorf("read-then-write: get %q: %w", pk, err)
		}
		n, v := intAttr(got.Item, "n"), intAttr(got.Item, "v")
		if n+1 > r.limit {
			return false, nil
		}
		item := map[string]types.AttributeValue{
			"pk": keyAttr["pk"], "n": num(n + 1), "v": num(v + 1), "expires_at": exp,
		}
		switch {
		case !r.conditional:
			_, err = r.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(r.table), Item: item})
		case v == 0:
			_, err = r.client.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: aws.String(r.table), Item: item,
				ConditionExpression: aws.String("attribute_not_exists(pk)"),
			})
		default:
			_, err = r.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(r.table), Key: keyAttr,
				UpdateExpression:    aws.String("SET n = :n, v = :v1, expires_at = :e"),
				ConditionExpression: aws.String("v = :v"),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":n": num(n + 1), ":v1": num(v + 1), ":v": num(v), ":e": exp,
				},
			})
		}
		if err == nil {
			return true, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return false, fmt.Errorf("read-then-write: write %q: %w", pk, err)
		}
		r.conflicts.Add(1)
		if attempt >= r.retries {
			return false, nil // lost the race: a denial, though quota may remain
		}
	}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func intAttr(item map[string]types.AttributeValue, name string) int64 {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(v.Value, 10, 64)
	return n
}
