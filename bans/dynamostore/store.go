// Package dynamostore keeps the bans of package bans in the strategies'
// DynamoDB table (ARCHITECTURE.md, Data model: partition key pk, TTL
// attribute expires_at), so that every instance counts the same denials
// and sees the same bans. One item per policy and hashed client key:
//
//	pk         "ban#<policy>#<keyhash>"
//	n          N   denials counted since since_ms
//	since_ms   N   the first of them, epoch milliseconds (0: none counted)
//	until_ms   N   the end of the key's current or last ban (0: none)
//	lvl        N   the bans of the key's current run
//	expires_at N   when the item stops mattering, epoch seconds: the last
//	               write plus ban.within + ban.max + ban.decay, plus a
//	               minute of clock skew
//
// A read is one strongly consistent GetItem. A denial is one conditional
// UpdateItem that adds 1 to n while the count's period lasts (or one that
// starts a new count when it has ended), returning the item; the denial
// that brings n to ban.after writes the ban with one more conditional
// UpdateItem, on the count it saw, so that of concurrent denials on any
// number of instances exactly that one starts it. Denials that race past
// it (n above after) are plain denials. A lift is one DeleteItem. The key
// is the engine's keyed hash: the table never holds a raw API key or
// address.
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
	"github.com/edgelimit/edgelimit/internal/banrule"
	"github.com/edgelimit/edgelimit/internal/ddb/ddbcore"
)

// API is the part of the DynamoDB client the functions' store calls,
// normally a *dynamodb.Client: the IAM actions a function with bans needs
// (a read of a key's ban, a count of its denial). e2e's
// TestTemplateGrantsOnlyTheDynamoDBActionsTheCodeCalls derives the
// template's grants from it.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// OperatorAPI is API and what an operator's LiftBan also calls. The
// functions never lift a ban, so their role needs no DeleteItem; a Store
// whose client lacks it refuses LiftBan with ErrConfig.
type OperatorAPI interface {
	API
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ OperatorAPI = (*dynamodb.Client)(nil)

// Config configures a Store.
type Config struct {
	// Client is the DynamoDB client. Required.
	Client API
	// Table is the strategies' table. Required.
	Table string
	// Now is the clock that decides whether an item has expired; default
	// time.Now.
	Now func() time.Time
}

// Errors of the store.
var (
	// ErrConfig reports a Config that cannot work.
	ErrConfig = errors.New("bans/dynamostore: bad config")
	// ErrBadItem reports an item the store did not write (an attribute
	// missing or not a number).
	ErrBadItem = errors.New("bans/dynamostore: bad ban item")
	// ErrContention reports a denial that could not be counted after
	// maxAttempts tries, each overtaken by another instance's write.
	ErrContention = errors.New("bans/dynamostore: denial not counted: the item kept changing")
)

// expiryMargin is the clock skew between instances an item's TTL allows.
const expiryMargin = time.Minute

// maxAttempts bounds the writes of one denial: each conditional write that
// fails does so because another instance's write landed first, which
// changes what the next attempt does.
const maxAttempts = 8

// Store is an edgelimit.BanStore on DynamoDB.
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

// PK is the partition key of the key's ban item under policy.
func PK(policy, key string) string { return "ban#" + policy + "#" + key }

func keyOf(k banrule.Key) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{ddbcore.AttrPK: &types.AttributeValueMemberS{Value: PK(k.Policy, k.Key)}}
}

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

var names = map[string]string{"#pk": ddbcore.AttrPK, "#n": "n", "#s": "since_ms", "#u": "until_ms", "#l": "lvl", "#e": ddbcore.AttrExpiresAt}

// ReadBan reads the key's state; an expired item is none.
func (s *Store) ReadBan(ctx context.Context, k banrule.Key) (banrule.State, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: s.table, Key: keyOf(k), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return banrule.State{}, fmt.Errorf("bans/dynamostore: reading a ban: %w", err)
	}
	return s.state(out.Item)
}

// state decodes an item; none, or an expired one, is the zero State.
func (s *Store) state(item map[string]types.AttributeValue) (banrule.State, error) {
	if len(item) == 0 {
		return banrule.State{}, nil
	}
	var bad error
	get := func(name string) int64 {
		v, ok := item[name].(*types.AttributeValueMemberN)
		if !ok {
			bad = fmt.Errorf("%w: %s is missing or not a number", ErrBadItem, name)
			return 0
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil || n < 0 {
			bad = fmt.Errorf("%w: %s is not a whole number", ErrBadItem, name)
		}
		return n
	}
	n, since, until, lvl, exp := get("n"), get("since_ms"), get("until_ms"), get("lvl"), get(ddbcore.AttrExpiresAt)
	if bad != nil {
		return banrule.State{}, bad
	}
	// TTL deletion is lazy: an expired item is absent.
	if !s.now().Before(time.Unix(exp, 0)) {
		return banrule.State{}, nil
	}
	st := banrule.State{Denials: n, Level: int(lvl)}
	if since > 0 {
		st.Since = time.UnixMilli(since)
	}
	if until > 0 {
		st.Until = time.UnixMilli(until)
	}
	return st, nil
}

// CountDenial counts one denial of the key at t (see the package
// documentation for the writes).
func (s *Store) CountDenial(ctx context.Context, k banrule.Key, r banrule.Rule, t time.Time) (banrule.Outcome, error) {
	ms := t.UnixMilli()
	exp := r.Expiry(t).Add(expiryMargin)
	vals := map[string]types.AttributeValue{
		":one": num(1), ":zero": num(0), ":t": num(ms), ":tw": num(ms - r.Within.Milliseconds()),
		":exp": num((exp.UnixMilli() + 999) / 1000),
	}
	for range maxAttempts {
		// The count's period lasts and the key is not banned: one more.
		st, err := s.update(ctx, k, "ADD #n :one SET #e = :exp",
			"attribute_exists(#pk) AND #s > :tw AND #u <= :t", vals)
		if errors.Is(err, errCondition) {
			// None counted, or the period has ended, and no ban: start
			// a count.
			st, err = s.update(ctx, k, "SET #n = :one, #s = :t, #e = :exp, #u = if_not_exists(#u, :zero), #l = if_not_exists(#l, :zero)",
				"attribute_not_exists(#pk) OR (#s <= :tw AND #u <= :t)", vals)
		}
		if errors.Is(err, errCondition) {
			// Banned, or another write started the count since: read.
			cur, err := s.ReadBan(ctx, k)
			if err != nil {
				return banrule.Outcome{}, err
			}
			if cur.Banned(t) {
				return banrule.Outcome{State: cur}, nil
			}
			continue
		}
		if err != nil {
			return banrule.Outcome{}, err
		}
		if st.Denials != r.After {
			return banrule.Outcome{State: st}, nil // below: counting; above: another denial is banning
		}
		return s.ban(ctx, k, r, st, t, vals)
	}
	return banrule.Outcome{}, ErrContention
}

// ban writes the ban the After-th denial starts, on the count it saw (the
// same period, no ban since).
func (s *Store) ban(ctx context.Context, k banrule.Key, r banrule.Rule, seen banrule.State, t time.Time, vals map[string]types.AttributeValue) (banrule.Outcome, error) {
	next := r.Ban(seen, t)
	v := map[string]types.AttributeValue{":zero": vals[":zero"], ":exp": vals[":exp"],
		":until": num(next.Until.UnixMilli()), ":lvl": num(int64(next.Level)),
		":since": num(seen.Since.UnixMilli()), ":old": num(msOf(seen.Until))}
	_, err := s.update(ctx, k, "SET #n = :zero, #s = :zero, #u = :until, #l = :lvl, #e = :exp", "#s = :since AND #u = :old", v)
	if errors.Is(err, errCondition) {
		// The count was overtaken (its period ended and another began
		// before this write, or the key was lifted): no ban from it.
		cur, err := s.ReadBan(ctx, k)
		return banrule.Outcome{State: cur}, err
	}
	if err != nil {
		return banrule.Outcome{}, err
	}
	return banrule.Outcome{State: next, Started: true}, nil
}

func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// errCondition is a conditional write whose condition did not hold.
var errCondition = errors.New("condition failed")

// update runs one conditional UpdateItem and returns the item after it.
func (s *Store) update(ctx context.Context, k banrule.Key, expr, cond string, vals map[string]types.AttributeValue) (banrule.State, error) {
	used := map[string]string{}
	for alias, name := range names {
		if containsWord(expr+" "+cond, alias) {
			used[alias] = name
		}
	}
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.table, Key: keyOf(k),
		UpdateExpression: aws.String(expr), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: used, ExpressionAttributeValues: usedValues(vals, expr+" "+cond),
		ReturnValues: types.ReturnValueAllNew})
	if ddbcore.IsConditionFailed(err) {
		return banrule.State{}, errCondition
	}
	if err != nil {
		return banrule.State{}, fmt.Errorf("bans/dynamostore: counting a denial: %w", err)
	}
	return s.state(out.Attributes)
}

// usedValues are the values the expressions name: DynamoDB refuses one
// they do not.
func usedValues(vals map[string]types.AttributeValue, exprs string) map[string]types.AttributeValue {
	out := map[string]types.AttributeValue{}
	for name, v := range vals {
		if containsWord(exprs, name) {
			out[name] = v
		}
	}
	return out
}

// containsWord reports whether w occurs in s as a whole name.
func containsWord(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		if s[i:i+len(w)] != w {
			continue
		}
		if end := i + len(w); end == len(s) || !isNameByte(s[end]) {
			return true
		}
	}
	return false
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// LiftBan deletes the key's item: its ban, count and level.
func (s *Store) LiftBan(ctx context.Context, k banrule.Key) error {
	d, ok := s.client.(OperatorAPI)
	if !ok {
		return fmt.Errorf("%w: the DynamoDB client (%T) cannot DeleteItem, which lifting a ban needs (dynamostore.OperatorAPI)", ErrConfig, s.client)
	}
	if _, err := d.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: s.table, Key: keyOf(k)}); err != nil {
		return fmt.Errorf("bans/dynamostore: lifting a ban: %w", err)
	}
	return nil
}

var _ edgelimit.BanStore = (*Store)(nil)
