package durablecounter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
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
	// spent are refunded by their receipts and the rest are read to name
	// every violated policy. It never over-admits, but between a member's
	// increment and its compensation a concurrent request to that member
	// can be denied spuriously. A compensation is retried until it lands or
	// the context ends; one that cannot land makes AllowBatch return its
	// error (its units stay spent until they leave the window: the engine
	// logs and counts it as a store failure).
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
	// RetryBackoff caps how long the SDK waits before it retries a failed
	// call (throttling, a dropped connection), so that its retries fit in
	// the policy's store_timeout (default 100 ms) instead of outlasting it:
	// the SDK's own back-off is up to seconds. Retries stay bounded by the
	// client's attempts and by the engine's time budget. Default 10 ms;
	// negative leaves the client's retryer as it is.
	RetryBackoff time.Duration
	// ViewCacheSize bounds what the store remembers of the items it wrote:
	// the sliding window, sliding log and gcra build their one conditional
	// update from this instance's last view of the item (see the package
	// documentation). Each item counts 1, plus 1 per millisecond bucket of
	// a sliding log. Default 262,144 (a few tens of MB at most); negative
	// disables the views, which costs a second call on most decisions of
	// those algorithms.
	ViewCacheSize int
}

// DefaultRetryBackoff is DynamoConfig.RetryBackoff's default.
const DefaultRetryBackoff = 10 * time.Millisecond

// DefaultViewCacheSize is DynamoConfig.ViewCacheSize's default.
const DefaultViewCacheSize = 1 << 18

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
	// views is this instance's last view of each item, or nil.
	views *stateCache
	// opts go with every call (the capped retry back-off).
	opts []func(*dynamodb.Options)
}

var _ Store = (*DynamoStore)(nil)

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
	switch {
	case cfg.ViewCacheSize == 0:
		s.views = newStateCache(DefaultViewCacheSize)
	case cfg.ViewCacheSize > 0:
		s.views = newStateCache(cfg.ViewCacheSize)
	}
	backoff := cfg.RetryBackoff
	if backoff == 0 {
		backoff = DefaultRetryBackoff
	}
	if backoff > 0 {
		s.opts = []func(*dynamodb.Options){func(o *dynamodb.Options) {
			if o.Retryer != nil {
				o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, backoff)
			}
		}}
	}
	s.key = fmt.Sprintf("durablecounter/dynamodb/%s/%p", cfg.Table, s)
	return s, nil
}

const (
	// maxAttempts bounds the conditional updates (or transactions) of one
	// decision: the first, and retries after a condition failed only
	// because this instance's view of the item was out of date, or a
	// transaction met another. The context (the engine's time budget)
	// bounds them first: a failure that a retry would resolve is retried
	// while the budget lasts, not reported as a store failure.
	maxAttempts = 32
	// maxRefundFailures bounds the retries of a refund whose call failed
	// (throttling, a dropped connection), within the context.
	maxRefundFailures = 8
	// maxReadRounds bounds BatchGetItem's rounds for unprocessed keys.
	maxReadRounds = 4
	// viewGrace keeps a view after its item stopped mattering: a sliding
	// log's count of expired units stays useful.
	viewGrace = 10 * time.Minute
)

func (s *DynamoStore) batchKey() string { return s.key }

func (s *DynamoStore) key1(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{ddb.AttrPK: &types.AttributeValueMemberS{Value: pk}}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func names(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// view returns this instance's last view of o's item, or the zero state.
func (s *DynamoStore) view(o *op) state {
	if s.views == nil || !o.alg.needsView() {
		return state{}
	}
	st, _ := s.views.get(o.id, o.t)
	return st
}

// remember keeps st as the view of o's item.
func (s *DynamoStore) remember(o *op, st state) {
	if s.views == nil || !o.alg.needsView() {
		return
	}
	s.views.put(o.id, st, o.t, max(o.alg.expiry(st, o.t), o.t)+int64(s.margin)+int64(viewGrace))
}

func (s *DynamoStore) forget(o *op) {
	if s.views != nil && o.alg.needsView() {
		s.views.del(o.id)
	}
}

func (s *DynamoStore) apply(ctx context.Context, op1 op) (result, error) {
	o := &op1
	pk := o.id.pk()
	view := s.view(o)
	for attempt := 1; ; attempt++ {
		var u ddbUpdate
		o.alg.update(view, o.t, o.cost, s.margin, &u)
		if u.readOnly { // can never fit: read the state for the headers
			st, err := s.getItem(ctx, o, pk)
			if err != nil {
				return result{}, err
			}
			return s.denied(o, st), nil
		}
		out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           s.table,
			Key:                                 s.key1(pk),
			UpdateExpression:                    aws.String(u.update),
			ConditionExpression:                 aws.String(u.cond),
			ExpressionAttributeNames:            names(u.names),
			ExpressionAttributeValues:           u.values,
			ReturnValues:                        u.ret,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}, s.opts...)
		if err == nil {
			st, err := o.alg.decode(out.Attributes, o.t)
			if err != nil {
				return result{}, fmt.Errorf("durablecounter: update %q: reply: %w", pk, err)
			}
			if !st.exists {
				return result{}, fmt.Errorf("durablecounter: update %q: reply has no state", pk)
			}
			s.remember(o, st)
			return result{ok: true, known: true, st: st, d: o.alg.decision(st, o.t, o.cost, true), rc: o.alg.receipt(st, u.at, o.cost)}, nil
		}
		var cf *types.ConditionalCheckFailedException
		if !errors.As(err, &cf) {
			return result{}, wrap("update", pk, err)
		}
		st, known, err := s.failed(ctx, o, pk, cf.Item)
		switch {
		case err != nil:
			return result{}, err
		case !known:
			// An exact condition failed: a denial, whose state the read
			// after it could not fetch.
			return result{d: o.alg.unknown(o.t, o.cost, false)}, nil
		case o.alg.exact() || !o.alg.fits(st, o.t, o.cost):
			return s.denied(o, st), nil
		}
		// The request fits the state that failed the condition: only the
		// view was out of date. Decide again with that state.
		if attempt == maxAttempts || ctx.Err() != nil {
			return result{}, fmt.Errorf("durablecounter: update %q: %w (%d conditional updates)", pk, ErrContention, attempt)
		}
		view = st
	}
}

// failed returns the state behind a failed condition: the old item that
// ALL_OLD returned, a lower bound the failure alone proves (algorithm.blind),
// or a consistent read, for servers that ignore ALL_OLD (dynalite). known is
// false only for an exact algorithm whose read failed: the denial stands.
func (s *DynamoStore) failed(ctx context.Context, o *op, pk string, old map[string]types.AttributeValue) (state, bool, error) {
	if old != nil {
		if st, err := o.alg.decode(old, o.t); err == nil {
			s.remember(o, st)
			return st, true, nil
		}
	}
	if lb, ok := o.alg.blind(o.t, o.cost); ok {
		return lb, true, nil
	}
	st, err := s.getItem(ctx, o, pk)
	if err != nil {
		if o.alg.exact() {
			return state{}, false, nil
		}
		return state{}, false, err
	}
	return st, true, nil
}

func (s *DynamoStore) denied(o *op, st state) result {
	return result{known: true, st: o.alg.compact(st, o.t), d: o.alg.decision(st, o.t, o.cost, false)}
}

// getItem returns the state of o's item with a strongly consistent read.
func (s *DynamoStore) getItem(ctx context.Context, o *op, pk string) (state, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      s.table,
		Key:            s.key1(pk),
		ConsistentRead: aws.Bool(true),
	}, s.opts...)
	if err != nil {
		return state{}, wrap("read", pk, err)
	}
	st, err := o.alg.decode(out.Item, o.t)
	if err != nil {
		return state{}, fmt.Errorf("durablecounter: read %q: %w", pk, err)
	}
	s.remember(o, st)
	return st, nil
}

func (s *DynamoStore) refund(ctx context.Context, op1 op, rc edgelimit.Receipt) (bool, error) {
	o := &op1
	pk := o.id.pk()
	var seen *state
	failures := 0
	for attempt := 1; ; attempt++ {
		var u ddbUpdate
		if !o.alg.refundUpdate(rc, seen, attempt, o.t, o.cost, &u) {
			return false, nil // nothing (left) to give back
		}
		_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           s.table,
			Key:                                 s.key1(pk),
			UpdateExpression:                    aws.String(u.update),
			ConditionExpression:                 aws.String(u.cond),
			ExpressionAttributeNames:            names(u.names),
			ExpressionAttributeValues:           u.values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}, s.opts...)
		if err == nil {
			s.forget(o) // the view is out of date now
			return true, nil
		}
		var cf *types.ConditionalCheckFailedException
		if errors.As(err, &cf) {
			if !o.alg.refundRetries() {
				return false, nil // the guard failed: nothing left to give back
			}
			// A concurrent refund changed what is left: look again.
			st, derr := o.alg.decode(cf.Item, o.t)
			if cf.Item == nil || derr != nil {
				if st, err = s.getItem(ctx, o, pk); err != nil {
					if failures++; failures > maxRefundFailures || ctx.Err() != nil {
						return false, err
					}
					continue
				}
			}
			seen = &st
			continue
		}
		if failures++; failures > maxRefundFailures || ctx.Err() != nil {
			return false, wrap("refund", pk, err)
		}
	}
}

func (s *DynamoStore) get(ctx context.Context, o op) (state, error) {
	return s.getItem(ctx, &o, o.id.pk())
}

func (s *DynamoStore) read(ctx context.Context, ops []op, out []state) error {
	if len(ops) == 1 {
		st, err := s.getItem(ctx, &ops[0], ops[0].id.pk())
		out[0] = st
		return err
	}
	pks := make([]string, len(ops))
	all := make([]int, len(ops))
	for i := range ops {
		pks[i], all[i] = ops[i].id.pk(), i
	}
	got, err := s.readAll(ctx, ops, pks, all)
	for i := range ops {
		out[i] = got[i]
	}
	return err
}

// readAll returns the states of the items of ops[i] for i in which
// (consistent reads, one BatchGetItem per 100 items, retrying unprocessed
// keys a few times). Items it could not read are missing from the map.
func (s *DynamoStore) readAll(ctx context.Context, ops []op, pks []string, which []int) (map[int]state, error) {
	out := make(map[int]state, len(which))
	byPK := make(map[string]int, len(which))
	for _, i := range which {
		byPK[pks[i]] = i
	}
	for len(which) > 0 {
		chunk := which[:min(len(which), 100)]
		which = which[len(chunk):]
		keys := make([]map[string]types.AttributeValue, len(chunk))
		for k, i := range chunk {
			keys[k] = s.key1(pks[i])
			out[i] = state{} // absent unless returned
		}
		req := map[string]types.KeysAndAttributes{*s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for round := 0; len(req) > 0; round++ {
			if round == maxReadRounds {
				for _, k := range req[*s.table].Keys {
					if v, ok := k[ddb.AttrPK].(*types.AttributeValueMemberS); ok {
						delete(out, byPK[v.Value])
					}
				}
				return out, fmt.Errorf("durablecounter: read %d items: still unprocessed after %d rounds", len(req[*s.table].Keys), maxReadRounds)
			}
			res, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req}, s.opts...)
			if err != nil {
				for _, i := range chunk {
					delete(out, i)
				}
				return out, wrap("read", pks[chunk[0]], err)
			}
			for _, item := range res.Responses[*s.table] {
				v, ok := item[ddb.AttrPK].(*types.AttributeValueMemberS)
				if !ok {
					continue
				}
				i, ok := byPK[v.Value]
				if !ok {
					continue
				}
				st, err := ops[i].alg.decode(item, ops[i].t)
				if err != nil {
					delete(out, i)
					continue
				}
				out[i] = st
				s.remember(&ops[i], st)
			}
			req = res.UnprocessedKeys
		}
	}
	return out, nil
}

func (s *DynamoStore) applyAll(ctx context.Context, ops []op, res []result) (bool, error) {
	if len(ops) == 1 { // one conditional update is atomic already
		r, err := s.apply(ctx, ops[0])
		res[0] = r
		return r.ok, err
	}
	if s.mode == TransactionsOff || s.mode == TransactionsAuto && s.noTx.Load() {
		return s.applySequential(ctx, ops, res)
	}
	committed, err := s.applyTransaction(ctx, ops, res)
	if err != nil && ddb.IsUnsupported(err) {
		if s.mode == TransactionsRequired {
			return false, fmt.Errorf("%w: %w", ErrNoTransactions, err)
		}
		s.noTx.Store(true)
		return s.applySequential(ctx, ops, res)
	}
	return committed, err
}

// memberVerdict is how a transaction's cancellation judged one member.
type memberVerdict uint8

const (
	held     memberVerdict = iota // its condition held
	violated                      // it does not fit: the batch is denied
	stale                         // its condition failed, but it fits the state returned
	unread                        // its condition failed without the old item: read it
	conflict                      // not evaluated (another transaction): read it if needed
)

func (s *DynamoStore) applyTransaction(ctx context.Context, ops []op, res []result) (bool, error) {
	n := len(ops)
	pks := make([]string, n)
	views := make([]state, n)
	for i := range ops {
		pks[i] = ops[i].id.pk()
		views[i] = s.view(&ops[i])
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	verdicts := make([]memberVerdict, n)
	states := make(map[int]state, n)
	rcs := make([]edgelimit.Receipt, n)
	for attempt := 1; ; attempt++ {
		in := &dynamodb.TransactWriteItemsInput{TransactItems: make([]types.TransactWriteItem, n)}
		never := false
		for i := range ops {
			u := ddbUpdate{tx: true}
			ops[i].alg.update(views[i], ops[i].t, ops[i].cost, s.margin, &u)
			rcs[i] = u.rc
			if u.readOnly {
				never = true
				break
			}
			in.TransactItems[i] = types.TransactWriteItem{Update: &types.Update{
				TableName:                           s.table,
				Key:                                 s.key1(pks[i]),
				UpdateExpression:                    aws.String(u.update),
				ConditionExpression:                 aws.String(u.cond),
				ExpressionAttributeNames:            names(u.names),
				ExpressionAttributeValues:           u.values,
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			}}
		}
		if never {
			// A member can never fit: the batch is denied. Read every member
			// to report each.
			for i := range verdicts {
				verdicts[i] = conflict // judged by the read
			}
			read, _ := s.readAll(ctx, ops, pks, all)
			s.judge(ops, verdicts, read, res)
			return false, nil
		}
		_, err := s.client.TransactWriteItems(ctx, in, s.opts...)
		if err == nil {
			// Committed. A transaction returns no values: read the states
			// (one BatchGetItem). Should that fail, the decisions stand with
			// their quotas unknown.
			read, _ := s.readAll(ctx, ops, pks, all)
			for i := range ops {
				if st, ok := read[i]; ok && st.exists {
					res[i] = result{ok: true, known: true, st: st, d: ops[i].alg.decision(st, ops[i].t, ops[i].cost, true)}
				} else {
					res[i] = result{ok: true, d: ops[i].alg.unknown(ops[i].t, ops[i].cost, true)}
				}
				res[i].rc = rcs[i]
			}
			return true, nil
		}
		var tc *types.TransactionCanceledException
		if !errors.As(err, &tc) {
			return false, wrap("transact", pks[0], err)
		}
		if len(tc.CancellationReasons) != n {
			return false, fmt.Errorf("durablecounter: transact %q: %d cancellation reasons for %d items: %w", pks[0], len(tc.CancellationReasons), n, err)
		}
		clear(states)
		var need []int
		anyViolated, anyConflict := false, false
		for i, reason := range tc.CancellationReasons {
			o := &ops[i]
			switch code := aws.ToString(reason.Code); code {
			case "", "None":
				verdicts[i] = held
				need = append(need, i)
			case "ConditionalCheckFailed":
				if reason.Item != nil {
					if st, err := o.alg.decode(reason.Item, o.t); err == nil {
						s.remember(o, st)
						states[i] = st
						verdicts[i] = stale
						if o.alg.exact() || !o.alg.fits(st, o.t, o.cost) {
							verdicts[i], anyViolated = violated, true
						}
						continue
					}
				}
				if lb, ok := o.alg.blind(o.t, o.cost); ok {
					states[i] = lb
					verdicts[i], anyViolated = violated, true
					continue
				}
				verdicts[i] = unread
				need = append(need, i)
			case "TransactionConflict":
				verdicts[i], anyConflict = conflict, true
				need = append(need, i)
			case "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
				return false, fmt.Errorf("durablecounter: transact %q: %w: %w", pks[i], ErrThrottled, err)
			default:
				return false, fmt.Errorf("durablecounter: transact %q: %s: %w", pks[i], code, err)
			}
		}
		if !anyViolated && !slices.Contains(verdicts, unread) {
			// Only out-of-date views and conflicts: try again.
			if attempt < maxAttempts && ctx.Err() == nil {
				for i, v := range verdicts {
					if v == stale {
						views[i] = states[i]
					}
				}
				continue
			}
			if anyConflict {
				return false, fmt.Errorf("durablecounter: transact %q: %w", pks[0], err)
			}
			return false, fmt.Errorf("durablecounter: transact %q: %w (%d transactions): %w", pks[0], ErrContention, attempt, err)
		}
		read, _ := s.readAll(ctx, ops, pks, need)
		for i, st := range read {
			states[i] = st
		}
		if !anyViolated {
			// Members that failed without their old item: judge them by
			// the read.
			for i, v := range verdicts {
				if v != unread {
					continue
				}
				st, ok := states[i]
				if !ok {
					return false, fmt.Errorf("durablecounter: transact %q: condition failed and the item could not be read: %w", pks[i], err)
				}
				if ops[i].alg.exact() || !ops[i].alg.fits(st, ops[i].t, ops[i].cost) {
					anyViolated = true
				}
			}
			if !anyViolated {
				if attempt < maxAttempts && ctx.Err() == nil {
					for i, v := range verdicts {
						if v == stale || v == unread {
							views[i] = states[i]
						}
					}
					continue
				}
				return false, fmt.Errorf("durablecounter: transact %q: %w (%d transactions): %w", pks[0], ErrContention, attempt, err)
			}
		}
		s.judge(ops, verdicts, states, res)
		return false, nil
	}
}

// judge fills the results of a batch that was not committed from each
// member's verdict and state: a member that does not fit is denied, the
// others report their state without the batch. A member that could not be
// read reports no violation and an unknown quota, unless its verdict
// already is one.
func (s *DynamoStore) judge(ops []op, verdicts []memberVerdict, states map[int]state, res []result) {
	for i := range ops {
		o := &ops[i]
		st, ok := states[i]
		switch {
		case verdicts[i] == violated && ok:
			res[i] = s.denied(o, st)
		case verdicts[i] == violated:
			res[i] = result{d: o.alg.unknown(o.t, o.cost, false)}
		case !ok:
			res[i] = result{ok: true, d: o.alg.unknown(o.t, o.cost, true)}
		case verdicts[i] == held && !o.alg.exact():
			// Its condition held, so it fit when the transaction ran; the
			// read may show a later state.
			res[i] = result{ok: true, known: true, st: o.alg.compact(st, o.t), d: o.alg.decision(st, o.t, o.cost, true)}
		case verdicts[i] == held:
			res[i] = result{ok: true, known: true, st: st, d: o.alg.decision(st, o.t, o.cost, true)}
		case (verdicts[i] == unread || verdicts[i] == conflict) && !o.alg.fits(st, o.t, o.cost),
			verdicts[i] == unread && o.alg.exact():
			res[i] = s.denied(o, st)
		default:
			res[i] = result{ok: true, known: true, st: o.alg.compact(st, o.t), d: o.alg.decision(st, o.t, o.cost, true)}
		}
	}
}

// applySequential is the batch fallback for servers without transactions
// (see TransactionsOff).
func (s *DynamoStore) applySequential(ctx context.Context, ops []op, res []result) (bool, error) {
	for i := range ops {
		r, err := s.apply(ctx, ops[i])
		if err != nil {
			return false, errors.Join(err, s.compensate(ctx, ops[:i], res[:i]))
		}
		res[i] = r
		if r.ok {
			continue
		}
		if err := s.compensate(ctx, ops[:i], res[:i]); err != nil {
			return false, err
		}
		// Read the members not tried yet, to name every violated policy.
		rest := make([]int, 0, len(ops)-i-1)
		verdicts := make([]memberVerdict, len(ops))
		pks := make([]string, len(ops))
		for j := i + 1; j < len(ops); j++ {
			pks[j] = ops[j].id.pk()
			verdicts[j] = conflict // judged by the read
			rest = append(rest, j)
		}
		read, _ := s.readAll(ctx, ops, pks, rest)
		tail := make([]result, len(ops))
		s.judge(ops, verdicts, read, tail)
		copy(res[i+1:], tail[i+1:])
		return false, nil
	}
	return true, nil
}

// compensate gives back what the members of a failed sequential batch
// spent, each by its receipt, and reports their state without the batch. A
// refund that does not land (Store.refund retries until its context ends)
// is an error: its units would stay spent until they leave the window, and
// the caller must know.
func (s *DynamoStore) compensate(ctx context.Context, ops []op, res []result) error {
	var errs []error
	for j := range ops {
		o := &ops[j]
		rc := res[j].rc
		res[j].rc = edgelimit.Receipt{}
		if _, err := s.refund(ctx, *o, rc); err != nil {
			errs = append(errs, fmt.Errorf("durablecounter: compensating a batch member: %w", err))
		}
		if !res[j].known {
			continue
		}
		st, _ := o.alg.giveBack(o.alg.compact(res[j].st, o.t), rc, o.t, o.cost)
		res[j].st = st
		res[j].d = o.alg.decision(st, o.t, o.cost, true)
	}
	return errors.Join(errs...)
}

func wrap(what, pk string, err error) error {
	if ddb.IsThrottle(err) {
		return fmt.Errorf("durablecounter: %s %q: %w: %w", what, pk, ErrThrottled, err)
	}
	return fmt.Errorf("durablecounter: %s %q: %w", what, pk, err)
}
