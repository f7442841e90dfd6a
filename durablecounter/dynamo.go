package durablecounter

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

	"github.com/edgelimit/edgelimit/internal/ddb"
)

// DynamoAPI is the part of *dynamodb.Client that DynamoStore uses.
type DynamoAPI interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// TransactionMode says how a DynamoStore commits a batch (several policies
// on one request, see Counter.AllowBatch).
type TransactionMode uint8

const (
	// TransactionsAuto, the default, commits a batch with one
	// TransactWriteItems. The first time the server answers that it does
	// not implement it (dynalite: UnknownOperationException), the store
	// switches to the sequential fallback of TransactionsOff for good,
	// starting with that batch. Real DynamoDB and moto never switch.
	TransactionsAuto TransactionMode = iota
	// TransactionsRequired always uses TransactWriteItems; a server without
	// it makes AllowBatch fail with ErrNoTransactions.
	TransactionsRequired
	// TransactionsOff commits a batch without transactions: one conditional
	// update per member in order; at the first denial, the members already
	// spent are given back (a guarded decrement each) and the rest are read
	// to name every violated policy. It never over-admits, but between a
	// member's increment and its compensation a concurrent request to that
	// member can be denied spuriously, and a compensation that fails leaves
	// its units spent until the window ends (under-admission, never over).
	TransactionsOff
)

// DefaultExpiryMargin is DynamoConfig.ExpiryMargin's default.
const DefaultExpiryMargin = time.Minute

// DynamoConfig configures a DynamoStore.
type DynamoConfig struct {
	// Client is the DynamoDB client, normally a *dynamodb.Client. Required.
	Client DynamoAPI
	// Table is the table's name: partition key pk (string), TTL attribute
	// expires_at (see internal/ddb.CreateTable or `edgelimit serve
	// --create-table`). Required.
	Table string
	// ExpiryMargin is how long an item outlives its window: expires_at is
	// the window's end plus this margin, rounded up to a second. DynamoDB's
	// TTL deletes by its own clock, so the margin is the clock skew between
	// instances the store tolerates; default 1 minute.
	ExpiryMargin time.Duration
	// Transactions says how AllowBatch commits several policies; default
	// TransactionsAuto.
	Transactions TransactionMode
}

// DynamoStore is a Store on a DynamoDB table, shared by every instance
// that uses the table. See the package documentation for the data model and
// the one-write protocol.
type DynamoStore struct {
	client DynamoAPI
	table  *string
	margin time.Duration
	mode   TransactionMode
	// noTx: the server answered that it lacks TransactWriteItems.
	noTx atomic.Bool
	key  string
}

var _ Store = (*DynamoStore)(nil)

// Attribute names and expressions of the one-write protocol.
const (
	attrCount = "n"
	// exprAdd spends :d and keeps the item until :e.
	exprAdd = "ADD n :d SET expires_at = :e"
	// condFits admits while the count leaves room for :d (:m = limit - d).
	condFits = "attribute_not_exists(n) OR n <= :m"
	// condNever is used when :d exceeds the limit (:m < 0): it fails whether
	// or not the item exists, so the reply still carries the count.
	condNever = "n <= :m"
	// exprRefund gives back :d (as :r = -d) only if that leaves n >= 0.
	exprRefund = "ADD n :r"
	condRefund = "n >= :d"
	// projection reads what a decision needs; batch reads also need the
	// key, to match replies to requests.
	projection      = "n, expires_at"
	projectionBatch = "pk, n, expires_at"
	// maxConflictRetries bounds the retries of a transaction cancelled only
	// by conflicts with other transactions (never by a condition); the
	// engine's time budget bounds them too.
	maxConflictRetries = 3
	// maxReadRounds bounds BatchGetItem's rounds for unprocessed keys.
	maxReadRounds = 4
)

// NewDynamoStore validates cfg and returns a DynamoStore. It makes no call:
// use internal/ddb.CheckTable to check the table at start-up.
func NewDynamoStore(cfg DynamoConfig) (*DynamoStore, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: DynamoConfig.Client is required", ErrConfig)
	}
	if cfg.Table == "" {
		return nil, fmt.Errorf("%w: DynamoConfig.Table is required", ErrConfig)
	}
	if cfg.ExpiryMargin < 0 {
		return nil, fmt.Errorf("%w: DynamoConfig.ExpiryMargin %s is negative", ErrConfig, cfg.ExpiryMargin)
	}
	if cfg.Transactions > TransactionsOff {
		return nil, fmt.Errorf("%w: DynamoConfig.Transactions %d is not a TransactionMode", ErrConfig, cfg.Transactions)
	}
	margin := cfg.ExpiryMargin
	if margin == 0 {
		margin = DefaultExpiryMargin
	}
	s := &DynamoStore{client: cfg.Client, table: aws.String(cfg.Table), margin: margin, mode: cfg.Transactions}
	s.key = fmt.Sprintf("durablecounter/dynamodb/%s/%p", cfg.Table, s)
	return s, nil
}

func (s *DynamoStore) batchKey() string { return s.key }

func (s *DynamoStore) key1(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{ddb.AttrPK: &types.AttributeValueMemberS{Value: pk}}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// addExpr returns the condition and values of an opAdd.
func (s *DynamoStore) addExpr(o *op) (cond string, values map[string]types.AttributeValue) {
	cond = condFits
	if o.delta > o.limit {
		cond = condNever
	}
	exp := o.end.Add(s.margin)
	expSec := exp.Unix()
	if exp.Nanosecond() > 0 {
		expSec++
	}
	return cond, map[string]types.AttributeValue{
		":d": num(o.delta),
		":m": num(o.limit - o.delta),
		":e": num(expSec),
	}
}

func (s *DynamoStore) apply(ctx context.Context, now time.Time, o op) (result, error) {
	pk := o.id.pk()
	cond, values := s.addExpr(&o)
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           s.table,
		Key:                                 s.key1(pk),
		UpdateExpression:                    aws.String(exprAdd),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		n, ok, perr := countAttr(out.Attributes)
		if perr != nil {
			return result{}, fmt.Errorf("durablecounter: update %q: reply: %w", pk, perr)
		}
		if !ok {
			return result{}, fmt.Errorf("durablecounter: update %q: reply has no attribute %s", pk, attrCount)
		}
		return result{ok: true, known: true, count: n}, nil
	}
	var cf *types.ConditionalCheckFailedException
	if !errors.As(err, &cf) {
		return result{}, wrap("update", pk, err)
	}
	// Denied. ALL_OLD carries the count that denied, except where the
	// server ignores it (dynalite) or there was no item (delta > limit).
	var r result
	if cf.Item != nil {
		if n, err := countOf(cf.Item, now); err == nil {
			return result{known: true, count: n}, nil
		}
	}
	if o.needOld {
		// The denial stands whatever the read does: on a read error the
		// count stays unknown rather than turning a denial into an error.
		if n, err := s.read(ctx, now, pk); err == nil {
			r.known, r.count = true, n
		}
	}
	return r, nil
}

func (s *DynamoStore) refund(ctx context.Context, _ time.Time, o op) error {
	pk := o.id.pk()
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           s.table,
		Key:                 s.key1(pk),
		UpdateExpression:    aws.String(exprRefund),
		ConditionExpression: aws.String(condRefund),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":r": num(-o.delta),
			":d": num(o.delta),
		},
	})
	if err != nil && !ddb.IsConditionFailed(err) {
		return wrap("refund", pk, err)
	}
	return nil // a failed guard means there is nothing to give back
}

// read returns an item's count with a strongly consistent read; an absent
// or expired item counts 0.
func (s *DynamoStore) read(ctx context.Context, now time.Time, pk string) (int64, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:            s.table,
		Key:                  s.key1(pk),
		ConsistentRead:       aws.Bool(true),
		ProjectionExpression: aws.String(projection),
	})
	if err != nil {
		return 0, wrap("read", pk, err)
	}
	n, err := countOf(out.Item, now)
	if err != nil {
		return 0, fmt.Errorf("durablecounter: read %q: %w", pk, err)
	}
	return n, nil
}

// readAll returns the counts of pks (consistent reads, one BatchGetItem per
// 100 keys, retrying unprocessed keys a few times). Absent or expired items
// count 0; keys it could not read are missing from the map.
func (s *DynamoStore) readAll(ctx context.Context, now time.Time, pks []string) (map[string]int64, error) {
	counts := make(map[string]int64, len(pks))
	for len(pks) > 0 {
		chunk := pks[:min(len(pks), 100)]
		pks = pks[len(chunk):]
		keys := make([]map[string]types.AttributeValue, len(chunk))
		for i, pk := range chunk {
			keys[i] = s.key1(pk)
			counts[pk] = 0 // absent unless returned
		}
		req := map[string]types.KeysAndAttributes{*s.table: {
			Keys: keys, ConsistentRead: aws.Bool(true), ProjectionExpression: aws.String(projectionBatch),
		}}
		for round := 0; len(req) > 0; round++ {
			if round == maxReadRounds {
				for _, k := range req[*s.table].Keys {
					if v, ok := k[ddb.AttrPK].(*types.AttributeValueMemberS); ok {
						delete(counts, v.Value)
					}
				}
				return counts, fmt.Errorf("durablecounter: read %d items: still unprocessed after %d rounds", len(req[*s.table].Keys), maxReadRounds)
			}
			out, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				for _, pk := range chunk {
					delete(counts, pk)
				}
				return counts, wrap("read", chunk[0], err)
			}
			for _, item := range out.Responses[*s.table] {
				v, ok := item[ddb.AttrPK].(*types.AttributeValueMemberS)
				if !ok {
					continue
				}
				if n, err := countOf(item, now); err == nil {
					counts[v.Value] = n
				}
			}
			req = out.UnprocessedKeys
		}
	}
	return counts, nil
}

func (s *DynamoStore) applyAll(ctx context.Context, now time.Time, ops []op, res []result) (bool, error) {
	if len(ops) == 1 { // one conditional update is atomic already
		r, err := s.apply(ctx, now, ops[0])
		res[0] = r
		return r.ok, err
	}
	if s.mode == TransactionsOff || s.mode == TransactionsAuto && s.noTx.Load() {
		return s.applySequential(ctx, now, ops, res)
	}
	committed, err := s.applyTransaction(ctx, now, ops, res)
	if err != nil && ddb.IsUnsupported(err) {
		if s.mode == TransactionsRequired {
			return false, fmt.Errorf("%w: %w", ErrNoTransactions, err)
		}
		s.noTx.Store(true)
		return s.applySequential(ctx, now, ops, res)
	}
	return committed, err
}

func (s *DynamoStore) applyTransaction(ctx context.Context, now time.Time, ops []op, res []result) (bool, error) {
	pks := make([]string, len(ops))
	in := &dynamodb.TransactWriteItemsInput{TransactItems: make([]types.TransactWriteItem, len(ops))}
	for i := range ops {
		pks[i] = ops[i].id.pk()
		cond, values := s.addExpr(&ops[i])
		in.TransactItems[i] = types.TransactWriteItem{Update: &types.Update{
			TableName:                           s.table,
			Key:                                 s.key1(pks[i]),
			UpdateExpression:                    aws.String(exprAdd),
			ConditionExpression:                 aws.String(cond),
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}}
	}
	for attempt := 0; ; attempt++ {
		_, err := s.client.TransactWriteItems(ctx, in)
		if err == nil {
			// Committed. A transaction returns no values: read the counts
			// (one BatchGetItem). Should that fail, the decisions stand with
			// their counts unknown.
			counts, _ := s.readAll(ctx, now, pks)
			for i, pk := range pks {
				n, ok := counts[pk]
				res[i] = result{ok: true, known: ok, count: n}
			}
			return true, nil
		}
		var tc *types.TransactionCanceledException
		if !errors.As(err, &tc) {
			return false, wrap("transact", pks[0], err)
		}
		if len(tc.CancellationReasons) != len(ops) {
			return false, fmt.Errorf("durablecounter: transact %q: %d cancellation reasons for %d items: %w", pks[0], len(tc.CancellationReasons), len(ops), err)
		}
		denied, conflict := false, false
		var unread, unjudged []int
		for i, reason := range tc.CancellationReasons {
			switch code := aws.ToString(reason.Code); code {
			case "", "None": // its condition held
				res[i] = result{ok: true}
				unread = append(unread, i)
			case "ConditionalCheckFailed":
				denied = true
				res[i] = result{}
				if reason.Item != nil {
					if n, err := countOf(reason.Item, now); err == nil {
						res[i] = result{known: true, count: n}
						continue
					}
				}
				if ops[i].needOld {
					unread = append(unread, i)
				}
			case "TransactionConflict": // not evaluated: judged by a read if denied
				conflict = true
				res[i] = result{ok: true}
				unjudged = append(unjudged, i)
			case "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
				return false, fmt.Errorf("durablecounter: transact %q: %w: %w", pks[i], ErrThrottled, err)
			default:
				return false, fmt.Errorf("durablecounter: transact %q: %s: %w", pks[i], code, err)
			}
		}
		if denied {
			s.fill(ctx, now, ops, pks, res, unread, unjudged)
			return false, nil
		}
		if conflict && attempt < maxConflictRetries && ctx.Err() == nil {
			continue
		}
		return false, fmt.Errorf("durablecounter: transact %q: %w", pks[0], err)
	}
}

// fill reads, with one BatchGetItem, the counts of members of a batch that
// was not committed, so that each reports its quota without the batch:
// those in read keep their verdict, those in judge (not evaluated by the
// server) are judged by the count read. A member that could not be read
// reports no violation and an unknown quota.
func (s *DynamoStore) fill(ctx context.Context, now time.Time, ops []op, pks []string, res []result, read, judge []int) {
	if len(read)+len(judge) == 0 {
		return
	}
	want := make([]string, 0, len(read)+len(judge))
	for _, i := range read {
		want = append(want, pks[i])
	}
	for _, i := range judge {
		want = append(want, pks[i])
	}
	counts, _ := s.readAll(ctx, now, want)
	for _, i := range read {
		if n, ok := counts[pks[i]]; ok {
			res[i].known, res[i].count = true, n
		}
	}
	for _, i := range judge {
		if n, ok := counts[pks[i]]; ok {
			res[i] = result{ok: fits(&ops[i], n), known: true, count: n}
		}
	}
}

func fits(o *op, n int64) bool { return o.delta <= o.limit && n <= o.limit-o.delta }

// applySequential is the batch fallback for servers without transactions
// (see TransactionsOff).
func (s *DynamoStore) applySequential(ctx context.Context, now time.Time, ops []op, res []result) (bool, error) {
	for i := range ops {
		r, err := s.apply(ctx, now, ops[i])
		if err != nil {
			s.compensate(ctx, now, ops[:i], res[:i])
			return false, err
		}
		res[i] = r
		if r.ok {
			continue
		}
		s.compensate(ctx, now, ops[:i], res[:i])
		// Read the members not tried yet, to name every violated policy.
		rest := make([]int, 0, len(ops)-i-1)
		pks := make([]string, len(ops))
		for j := i + 1; j < len(ops); j++ {
			pks[j] = ops[j].id.pk()
			res[j] = result{ok: true}
			rest = append(rest, j)
		}
		s.fill(ctx, now, ops, pks, res, nil, rest)
		return false, nil
	}
	return true, nil
}

// compensate gives back what the members of a failed sequential batch
// spent, and reports their counts without the batch.
func (s *DynamoStore) compensate(ctx context.Context, now time.Time, ops []op, res []result) {
	for j := range ops {
		// A failed compensation leaves the units spent: under-admission
		// until the window ends, never over-admission.
		_ = s.refund(ctx, now, ops[j])
		res[j].count = max(0, res[j].count-ops[j].delta)
	}
}

// countOf returns an item's count; an absent or expired item counts 0.
func countOf(item map[string]types.AttributeValue, now time.Time) (int64, error) {
	if len(item) == 0 {
		return 0, nil
	}
	if e, ok := item[ddb.AttrExpiresAt].(*types.AttributeValueMemberN); ok {
		if sec, err := strconv.ParseInt(e.Value, 10, 64); err == nil && sec <= now.Unix() {
			return 0, nil // expired: TTL deletion is lazy
		}
	}
	n, ok, err := countAttr(item)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, nil
	}
	return n, nil
}

func countAttr(item map[string]types.AttributeValue) (int64, bool, error) {
	v, ok := item[attrCount]
	if !ok {
		return 0, false, nil
	}
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false, fmt.Errorf("attribute %s is a %T, not a number", attrCount, v)
	}
	n, err := strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("attribute %s: %w", attrCount, err)
	}
	return n, true, nil
}

func wrap(what, pk string, err error) error {
	if ddb.IsThrottle(err) {
		return fmt.Errorf("durablecounter: %s %q: %w: %w", what, pk, ErrThrottled, err)
	}
	return fmt.Errorf("durablecounter: %s %q: %w", what, pk, err)
}
