package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
	"github.com/edgelimit/edgelimit/internal/ddb/ddbcore"
)

// conn is a wire.Conn on the AWS SDK: it converts durablecounter's
// SDK-free updates into requests and the replies back, and nothing more
// (every decision is durablecounter's). Of the servers' quirks it absorbs
// one, in readOld: dynalite ignores ReturnValuesOnConditionCheckFailure.
type conn struct {
	client DynamoAPI
	table  *string
	// opts go with every call (the capped retry back-off).
	opts []func(*dynamodb.Options)
}

var _ wire.Conn = (*conn)(nil)

func (c *conn) key(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{ddbcore.AttrPK: &types.AttributeValueMemberS{Value: pk}}
}

// expr converts an update's names and values.
func expr(u *wire.Update) (map[string]string, map[string]types.AttributeValue) {
	var names map[string]string
	if len(u.Names) > 0 {
		names = make(map[string]string, len(u.Names))
		for _, n := range u.Names {
			names[n.Placeholder] = n.Attr
		}
	}
	var values map[string]types.AttributeValue
	if len(u.Values) > 0 {
		values = make(map[string]types.AttributeValue, len(u.Values))
		for _, v := range u.Values {
			values[v.Placeholder] = &types.AttributeValueMemberN{Value: strconv.FormatInt(v.N, 10)}
		}
	}
	return names, values
}

var returns = [...]types.ReturnValue{wire.ReturnNone: "", wire.ReturnUpdatedNew: types.ReturnValueUpdatedNew, wire.ReturnAllNew: types.ReturnValueAllNew}

func (c *conn) Update(ctx context.Context, pk string, u *wire.Update) (wire.Item, error) {
	names, values := expr(u)
	out, err := c.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           c.table,
		Key:                                 c.key(pk),
		UpdateExpression:                    aws.String(u.Expr),
		ConditionExpression:                 aws.String(u.Cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        returns[u.Return],
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, c.opts...)
	if err == nil {
		return itemOf(out.Attributes), nil
	}
	var cf *types.ConditionalCheckFailedException
	if !errors.As(err, &cf) {
		return nil, err
	}
	failed := &wire.ConditionFailed{Old: itemOf(cf.Item), Err: err}
	if failed.Old == nil && !u.SkipOldRead {
		olds, errs := c.readOld(ctx, []string{pk})
		failed.Old, failed.ReadErr = olds[0], errs[0]
	}
	return nil, failed
}

// readOld reads the items whose condition failed without the old item
// that ReturnValuesOnConditionCheckFailure=ALL_OLD asks for. dynalite
// ignores ALL_OLD (and a server returns no old item for an item that does
// not exist): this is the one place that makes up for it, with one
// consistent read (one GetItem, or one BatchGetItem for several members of
// a transaction). olds[i] is empty for an absent item, and nil with
// errs[i] set when it could not be read.
func (c *conn) readOld(ctx context.Context, pks []string) (olds []wire.Item, errs []error) {
	olds, errs = make([]wire.Item, len(pks)), make([]error, len(pks))
	defer func() {
		for i := range olds {
			if olds[i] == nil && errs[i] == nil {
				olds[i] = item{} // read, and absent
			}
		}
	}()
	if len(pks) == 1 {
		olds[0], errs[0] = c.Get(ctx, pks[0])
		return olds, errs
	}
	at := make(map[string]int, len(pks))
	for i, pk := range pks {
		at[pk] = i
	}
	left, err := c.BatchGet(ctx, pks, func(pk string, it wire.Item) {
		if i, ok := at[pk]; ok {
			olds[i] = it
		}
	})
	if err == nil && len(left) > 0 {
		err = fmt.Errorf("%d items left unprocessed", len(left))
	}
	if err != nil {
		for i := range errs {
			olds[i], errs[i] = nil, err
		}
	}
	return olds, errs
}

func (c *conn) Get(ctx context.Context, pk string) (wire.Item, error) {
	out, err := c.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      c.table,
		Key:            c.key(pk),
		ConsistentRead: aws.Bool(true),
	}, c.opts...)
	if err != nil {
		return nil, err
	}
	return itemOf(out.Item), nil
}

func (c *conn) BatchGet(ctx context.Context, pks []string, found func(pk string, it wire.Item)) ([]string, error) {
	keys := make([]map[string]types.AttributeValue, len(pks))
	for i, pk := range pks {
		keys[i] = c.key(pk)
	}
	res, err := c.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
		RequestItems: map[string]types.KeysAndAttributes{*c.table: {Keys: keys, ConsistentRead: aws.Bool(true)}},
	}, c.opts...)
	if err != nil {
		return nil, err
	}
	for _, it := range res.Responses[*c.table] {
		if v, ok := it[ddbcore.AttrPK].(*types.AttributeValueMemberS); ok {
			found(v.Value, item(it))
		}
	}
	var left []string
	for _, k := range res.UnprocessedKeys[*c.table].Keys {
		if v, ok := k[ddbcore.AttrPK].(*types.AttributeValueMemberS); ok {
			left = append(left, v.Value)
		}
	}
	return left, nil
}

func (c *conn) Transact(ctx context.Context, pks []string, us []wire.Update) error {
	in := &dynamodb.TransactWriteItemsInput{TransactItems: make([]types.TransactWriteItem, len(us))}
	for i := range us {
		names, values := expr(&us[i])
		in.TransactItems[i] = types.TransactWriteItem{Update: &types.Update{
			TableName:                           c.table,
			Key:                                 c.key(pks[i]),
			UpdateExpression:                    aws.String(us[i].Expr),
			ConditionExpression:                 aws.String(us[i].Cond),
			ExpressionAttributeNames:            names,
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}}
	}
	_, err := c.client.TransactWriteItems(ctx, in, c.opts...)
	var tc *types.TransactionCanceledException
	if err == nil || !errors.As(err, &tc) {
		return err
	}
	canceled := &wire.Canceled{Reasons: make([]wire.Reason, len(tc.CancellationReasons)), Err: err}
	var unread []int
	for i, r := range tc.CancellationReasons {
		code := aws.ToString(r.Code)
		out := wire.Reason{Name: code}
		switch code {
		case "", "None":
			out.Code = wire.CodeNone
		case "ConditionalCheckFailed":
			out.Code, out.Old = wire.CodeConditionFailed, itemOf(r.Item)
			if out.Old == nil && i < len(us) && !us[i].SkipOldRead {
				unread = append(unread, i)
			}
		case "TransactionConflict":
			out.Code = wire.CodeConflict
		case "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
			out.Code = wire.CodeThrottled
		default:
			out.Code = wire.CodeOther
		}
		canceled.Reasons[i] = out
	}
	if len(unread) > 0 {
		pks1 := make([]string, len(unread))
		for k, i := range unread {
			pks1[k] = pks[i]
		}
		olds, errs := c.readOld(ctx, pks1)
		for k, i := range unread {
			canceled.Reasons[i].Old, canceled.Reasons[i].ReadErr = olds[k], errs[k]
		}
	}
	return canceled
}

func (c *conn) Throttled(err error) bool   { return ddbcore.IsThrottle(err) }
func (c *conn) Unsupported(err error) bool { return ddbcore.IsUnsupported(err) }

// item is a wire.Item on the SDK's attribute map, without a copy.
type item map[string]types.AttributeValue

// itemOf returns m as a wire.Item, nil when m is (an absent item).
func itemOf(m map[string]types.AttributeValue) wire.Item {
	if m == nil {
		return nil
	}
	return item(m)
}

func (it item) Len() int { return len(it) }

func (it item) Int(name string) (int64, bool, error) {
	v, ok := it[name]
	if !ok {
		return 0, false, nil
	}
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false, fmt.Errorf("attribute %s is a %T, not a number", name, v)
	}
	n, err := strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("attribute %s: %w", name, err)
	}
	return n, true, nil
}

func (it item) Attrs() iter.Seq[string] { return maps.Keys(it) }
