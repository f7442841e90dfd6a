// Package dynamostore is the DynamoDB Store of package inflight: the slots
// of every key in one item of the edgelimit table, shared by every instance
// that uses the table. It is a package of its own so that programs that
// keep their in-flight slots in memory do not link the DynamoDB SDK.
//
// # The item
//
// One item per policy and key, in the one table of the project (partition
// key pk, TTL attribute expires_at):
//
//	pk          S  "if#<policy>#<keyhash>"
//	n           N  the slots the item's holders hold (live or not)
//	h_<slotid>  N  one per holder of one slot: its lease expiry, Unix nanoseconds
//	h<u>_<slotid> N  one per holder of u > 1 slots (h3_...): the same
//	expires_at  N  the latest lease expiry plus ExpiryMargin, Unix seconds
//
// A holder is live until its expiry. n counts the holders' slots whether
// live or not: every write that adds or removes a holder moves n by its
// units, in the same conditional UpdateItem, so n is the sum of the units
// the h attributes' names say. A holder's units are in its attribute's
// name, not a second attribute, so that a release, which knows them from
// its request, is still one write whose condition (the attribute exists)
// also checks them.
//
// # The writes
//
// A take of u slots is one UpdateItem in the common case, all u or none:
//
//	SET h<u>_<id> = :expiry, expires_at = :ttl ADD n :u
//	IF (attribute_not_exists(n) OR n < :room) AND attribute_not_exists(h<u>_<id>)
//
// where :room is limit - u + 1 (a condition cannot add; for u = 1 it is
// the limit),
// with ReturnValues ALL_NEW, which reports the holders for the decision's
// headers at no extra cost. When the condition fails, the item as it was
// (ReturnValuesOnConditionCheckFailure ALL_OLD; a consistent GetItem on
// servers that ignore it, like dynalite) says why: if its live holders hold
// more than limit - u slots at the decision's instant, the take is denied,
// and that denial is real. Otherwise some holders' leases have expired (their
// instances died mid-request, or their release failed), and one
// conditional UpdateItem reclaims them and takes the slot together:
//
//	SET h<u>_<id> = :expiry, n = :n', expires_at = :ttl REMOVE h_<a>, h3_<b>, ...
//	IF n = :n AND h_<a> = :expiry_a AND h3_<b> = :expiry_b ... AND attribute_not_exists(h<u>_<id>)
//
// which holds only if no one changed the item's holder count and each
// reclaimed holder is still there with the expiry that was read (a holder
// released meanwhile is not reclaimed twice). If another instance changed
// the item in between, the answer (or a new read) is the next round; rounds
// are bounded by the context and by 32 attempts (then ErrContention, a
// store failure).
//
// A release is one UpdateItem: REMOVE h<u>_<id> ADD n :minus_u IF
// attribute_exists(h<u>_<id>), so releasing twice, or after the holder was
// reclaimed, or with units other than the take's, changes nothing.
//
// # Round trips
//
//   - take, a slot free: 1 UpdateItem.
//   - take, the limit live (a denial): 1 UpdateItem (2 calls on dynalite:
//     the GetItem it needs).
//   - take, a slot reclaimed from expired holders: 2 UpdateItems (3 calls on
//     dynalite); under contention, one more UpdateItem (and GetItem) per
//     round lost to another instance.
//   - release: 1 UpdateItem.
//   - peek: 1 consistent GetItem.
//
// The counts are the same whatever a take's units: one holder attribute
// and one move of n. Each write is 1 WCU while the item is under 1 KB: a
// few tens of holders.
//
// # Time
//
// Lease expiries are the deciding instance's clock: a holder counts as live
// until the clock of the instance that asks passes its expiry, so the clock
// skew between instances (milliseconds on Lambda) shortens or lengthens a
// lease by as much. DynamoDB's
// TTL deletes an item by its own clock after expires_at, which is at least
// ExpiryMargin (default a minute) after every holder's expiry: never while
// one is live.
package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/inflight/internal/wire"
	"github.com/edgelimit/edgelimit/internal/ddb/ddbcore"
)

// API is the part of *dynamodb.Client that Store uses.
type API interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Config configures a Store.
type Config struct {
	// Client is the DynamoDB client, normally a *dynamodb.Client. Required.
	Client API
	// Table is the table's name: partition key pk (string), TTL attribute
	// expires_at (see internal/ddb.CreateTable or `edgelimit serve
	// --create-table`). Required.
	Table string
	// ExpiryMargin is how long an item outlives the latest lease of its
	// holders: DynamoDB's TTL deletes by its own clock, so the margin is
	// the clock skew between instances the store tolerates; default 1
	// minute.
	ExpiryMargin time.Duration
	// RetryBackoff caps how long the SDK waits before it retries a failed
	// call, so that its retries fit in the policy's store_timeout instead
	// of outlasting it. Default 10 ms; negative leaves the client's
	// retryer as it is.
	RetryBackoff time.Duration
	// CleanupTimeout bounds the release a take sends after its write
	// failed without a definite answer (a timeout, a dropped connection, a
	// server error): the write may have landed, and the holder it added
	// would otherwise keep its slot until its lease ends. Default 200 ms;
	// negative sends none.
	CleanupTimeout time.Duration
}

// Defaults of Config.
const (
	DefaultExpiryMargin   = time.Minute
	DefaultRetryBackoff   = 10 * time.Millisecond
	DefaultCleanupTimeout = 200 * time.Millisecond
)

// Store is an inflight.Store on a DynamoDB table, shared by every instance
// that uses the table. See the package documentation for the item and the
// writes.
type Store struct {
	// inner is inflight's Store on this package's conn: embedding it makes
	// *Store an inflight.Store, whose methods are sealed.
	inner
}

type inner = inflight.Store

var _ inflight.Store = (*Store)(nil)

// conn keeps the slots in the table: the lease protocol's operations
// (wire.Store) as DynamoDB calls.
type conn struct {
	client  API
	table   *string
	margin  time.Duration
	cleanup time.Duration
	opts    []func(*dynamodb.Options)
}

var _ wire.Store = (*conn)(nil)

// New validates cfg and returns a Store. It makes no call: use
// internal/ddb.CheckTable to check the table at start-up.
func New(cfg Config) (*Store, error) {
	switch {
	case cfg.Client == nil:
		return nil, fmt.Errorf("%w: dynamostore: Config.Client is required", inflight.ErrConfig)
	case cfg.Table == "":
		return nil, fmt.Errorf("%w: dynamostore: Config.Table is required", inflight.ErrConfig)
	case cfg.ExpiryMargin < 0:
		return nil, fmt.Errorf("%w: dynamostore: Config.ExpiryMargin %s is negative", inflight.ErrConfig, cfg.ExpiryMargin)
	}
	s := &conn{client: cfg.Client, table: aws.String(cfg.Table), margin: cfg.ExpiryMargin, cleanup: cfg.CleanupTimeout}
	if s.margin == 0 {
		s.margin = DefaultExpiryMargin
	}
	if s.cleanup == 0 {
		s.cleanup = DefaultCleanupTimeout
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
	return &Store{inner: wire.NewStore(s).(inflight.Store)}, nil
}

const (
	attrN = "n"
	// holderPrefix starts the name of each holder's attribute.
	holderPrefix = "h_"
	// maxAttempts bounds the conditional writes of one take.
	maxAttempts = 32
	// maxReclaim bounds the expired holders one write removes, to keep
	// its expressions small; one is enough to take a slot, and the rest
	// are reclaimed by later takes as they need them.
	maxReclaim = 32
)

// holderAttr names the attribute of holder id of units slots: h_<id> for
// one (every holder before costs existed), h<units>_<id> for more.
func holderAttr(id wire.SlotID, units int64) string {
	if units <= 1 {
		return holderPrefix + id.String()
	}
	return "h" + strconv.FormatInt(units, 10) + "_" + id.String()
}

// holderUnits returns the units of the holder an attribute named name
// stands for, or false if it names no holder: "h_..." holds 1, "h3_..." 3.
func holderUnits(name string) (int64, bool) {
	if strings.HasPrefix(name, holderPrefix) {
		return 1, true
	}
	digits, _, ok := strings.Cut(strings.TrimPrefix(name, "h"), "_")
	if !ok || !strings.HasPrefix(name, "h") || digits == "" || digits[0] == '0' {
		return 0, false
	}
	u, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || u < 2 {
		return 0, false
	}
	return u, true
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func (s *conn) key(item string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{ddbcore.AttrPK: &types.AttributeValueMemberS{Value: item}}
}

// ttl is the expires_at of an item whose latest lease ends at expiry (Unix
// nanoseconds).
func (s *conn) ttl(expiry int64) int64 {
	ns := expiry + int64(s.margin)
	secs := ns / 1e9
	if ns%1e9 > 0 {
		secs++
	}
	return secs
}

// holder is one holder read from an item.
type holder struct {
	attr   string
	expiry int64 // Unix nanoseconds, as stored
	units  int64 // from attr's name
	raw    string
}

// view is an item as read.
type view struct {
	exists  bool
	n       int64
	ttl     int64
	holders []holder
}

func parse(item map[string]types.AttributeValue) (view, error) {
	v := view{exists: item != nil}
	for name, av := range item {
		units, isHolder := holderUnits(name)
		switch {
		case name == attrN, name == ddbcore.AttrExpiresAt, isHolder:
		default:
			continue
		}
		nv, ok := av.(*types.AttributeValueMemberN)
		if !ok {
			return view{}, fmt.Errorf("dynamostore: attribute %s is a %T, not a number", name, av)
		}
		x, err := strconv.ParseInt(nv.Value, 10, 64)
		if err != nil {
			return view{}, fmt.Errorf("dynamostore: attribute %s: %w", name, err)
		}
		switch name {
		case attrN:
			v.n = x
		case ddbcore.AttrExpiresAt:
			v.ttl = x
		default:
			v.holders = append(v.holders, holder{attr: name, expiry: x, units: units, raw: nv.Value})
		}
	}
	return v, nil
}

// state returns the slots of v's live holders at now (Unix nanoseconds).
func (v view) state(now int64) wire.State {
	var st wire.State
	for _, h := range v.holders {
		if e := h.expiry; e > now {
			st.Live += h.units
			if st.Earliest == 0 || e < st.Earliest {
				st.Earliest = e
			}
		}
	}
	return st
}

// latest returns the latest expiry of v's holders, Unix nanoseconds.
func (v view) latest() int64 {
	var l int64
	for _, h := range v.holders {
		l = max(l, h.expiry)
	}
	return l
}

func (v view) has(attr string) bool {
	for _, h := range v.holders {
		if h.attr == attr {
			return true
		}
	}
	return false
}

// TakeSlot implements wire.Store.
func (s *conn) TakeSlot(ctx context.Context, t wire.Take) (bool, wire.State, error) {
	units := wire.UnitsOf(t.Units)
	if units > t.Limit {
		// Never fits; the plain take's condition would hold on an absent
		// item, so it is not sent.
		st, err := s.Slots(ctx, t.Item, t.Now)
		return false, st, err
	}
	attr := holderAttr(t.ID, units)
	exp := num(t.Expiry)
	ttl := num(s.ttl(t.Expiry))
	plain := &dynamodb.UpdateItemInput{
		TableName:                           s.table,
		Key:                                 s.key(t.Item),
		UpdateExpression:                    aws.String("SET #h = :e, expires_at = :t ADD n :u"),
		ConditionExpression:                 aws.String("(attribute_not_exists(n) OR n < :l) AND attribute_not_exists(#h)"),
		ExpressionAttributeNames:            map[string]string{"#h": attr},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":e": exp, ":t": ttl, ":u": num(units), ":l": num(t.Limit - units + 1)},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	out, err := s.client.UpdateItem(ctx, plain, s.opts...)
	for attempt := 1; ; attempt++ {
		if err == nil {
			return s.taken(ctx, t, units, out.Attributes)
		}
		var cf *types.ConditionalCheckFailedException
		if !errors.As(err, &cf) {
			s.clean(ctx, t.Item, t.ID, units, err)
			return false, wire.State{}, wrap("take", t.Item, err)
		}
		old := cf.Item
		if old == nil {
			// The server ignored ALL_OLD (dynalite): read the item.
			if old, err = s.get(ctx, t.Item); err != nil {
				return false, wire.State{}, err
			}
		}
		v, perr := parse(old)
		if perr != nil {
			return false, wire.State{}, fmt.Errorf("dynamostore: item %q: %w", t.Item, perr)
		}
		if v.has(attr) {
			return false, wire.State{}, fmt.Errorf("dynamostore: item %q: slot id %s is already a holder", t.Item, t.ID)
		}
		st := v.state(t.Now)
		if st.Live+units > t.Limit {
			return false, st, nil // more than limit - units were held when the item was read
		}
		if attempt >= maxAttempts {
			return false, wire.State{}, fmt.Errorf("dynamostore: item %q: %w", t.Item, inflight.ErrContention)
		}
		if !v.exists || v.n+units <= t.Limit {
			// A release (or TTL) freed the slots since the write failed:
			// the plain take again.
			out, err = s.client.UpdateItem(ctx, plain, s.opts...)
			continue
		}
		out, err = s.client.UpdateItem(ctx, s.reclaim(t, units, v, attr, exp, ttl), s.opts...)
	}
}

// reclaim builds the write that removes up to maxReclaim of v's expired
// holders and adds t's of units slots, provided the item still has v's
// count and each of those holders, with the expiry read.
func (s *conn) reclaim(t wire.Take, units int64, v view, attr string, exp, ttl types.AttributeValue) *dynamodb.UpdateItemInput {
	names := map[string]string{"#h": attr}
	values := map[string]types.AttributeValue{":e": exp, ":t": ttl, ":n": num(v.n)}
	var remove, cond strings.Builder
	cond.WriteString("n = :n AND attribute_not_exists(#h)")
	k, held, freed := int64(0), int64(0), int64(0)
	for _, h := range v.holders {
		held += h.units
		if h.expiry > t.Now || k == maxReclaim {
			continue
		}
		ks := strconv.FormatInt(k, 10)
		names["#r"+ks] = h.attr
		values[":r"+ks] = &types.AttributeValueMemberN{Value: h.raw}
		if k > 0 {
			remove.WriteString(", ")
		}
		remove.WriteString("#r" + ks)
		cond.WriteString(" AND #r" + ks + " = :r" + ks)
		k++
		freed += h.units
	}
	// n' counts the slots the item's holders will hold: those read, less
	// the reclaimed holders', plus the new one's. With the invariant n =
	// the holders' units it is n - freed + units.
	values[":m"] = num(held - freed + units)
	update := "SET #h = :e, n = :m, expires_at = :t"
	if k > 0 {
		update += " REMOVE " + remove.String()
	}
	return &dynamodb.UpdateItemInput{
		TableName:                           s.table,
		Key:                                 s.key(t.Item),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond.String()),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// taken reports a take that landed, from the item after it. If another
// holder's lease ends after the new one's (a tier or an override with a
// longer lease), expires_at, which the take set from its own lease, is
// raised to cover it: a second write only then.
func (s *conn) taken(ctx context.Context, t wire.Take, units int64, after map[string]types.AttributeValue) (bool, wire.State, error) {
	v, err := parse(after)
	if err != nil {
		// An item this store did not write: give the slots back rather
		// than report a take the caller will not release.
		_, _ = s.ReleaseSlot(ctx, t.Item, t.ID, units)
		return false, wire.State{}, fmt.Errorf("dynamostore: item %q: %w", t.Item, err)
	}
	st := v.state(t.Now)
	if st.Live == 0 { // a server that returned nothing: at least this holder
		st = wire.State{Live: units, Earliest: t.Expiry}
	}
	if latest := v.latest(); latest > t.Expiry {
		want := s.ttl(latest)
		_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 s.table,
			Key:                       s.key(t.Item),
			UpdateExpression:          aws.String("SET expires_at = :t"),
			ConditionExpression:       aws.String("attribute_exists(n) AND expires_at < :t"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":t": num(want)},
		}, s.opts...)
		if err != nil && !ddbcore.IsConditionFailed(err) {
			// The slot is taken; only the item's TTL is short of a longer
			// lease. Release it rather than report a slot the caller will
			// not release.
			s.clean(ctx, t.Item, t.ID, units, err)
			return false, wire.State{}, wrap("extend the expiry of", t.Item, err)
		}
	}
	return true, st, nil
}

// clean releases holder id of units slots after a take failed with err, if
// err leaves open whether the write landed.
func (s *conn) clean(ctx context.Context, item string, id wire.SlotID, units int64, err error) {
	if s.cleanup < 0 || definite(err) {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cleanup)
	defer cancel()
	_, _ = s.ReleaseSlot(cctx, item, id, units)
}

// definite reports whether err is an answer from DynamoDB that the write
// did not happen: a client fault (validation, throttling, a failed
// condition). A server fault, a timeout or a dropped connection leaves it
// open.
func definite(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient
}

// ReleaseSlot implements wire.Store.
func (s *conn) ReleaseSlot(ctx context.Context, item string, id wire.SlotID, units int64) (bool, error) {
	units = wire.UnitsOf(units)
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 s.table,
		Key:                       s.key(item),
		UpdateExpression:          aws.String("REMOVE #h ADD n :m"),
		ConditionExpression:       aws.String("attribute_exists(#h)"),
		ExpressionAttributeNames:  map[string]string{"#h": holderAttr(id, units)},
		ExpressionAttributeValues: map[string]types.AttributeValue{":m": num(-units)},
	}, s.opts...)
	switch {
	case err == nil:
		return true, nil
	case ddbcore.IsConditionFailed(err):
		return false, nil // released already, or reclaimed
	}
	return false, wrap("release", item, err)
}

// Slots implements wire.Store.
func (s *conn) Slots(ctx context.Context, item string, now int64) (wire.State, error) {
	m, err := s.get(ctx, item)
	if err != nil {
		return wire.State{}, err
	}
	v, err := parse(m)
	if err != nil {
		return wire.State{}, fmt.Errorf("dynamostore: item %q: %w", item, err)
	}
	return v.state(now), nil
}

func (s *conn) get(ctx context.Context, item string) (map[string]types.AttributeValue, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      s.table,
		Key:            s.key(item),
		ConsistentRead: aws.Bool(true),
	}, s.opts...)
	if err != nil {
		return nil, wrap("read", item, err)
	}
	return out.Item, nil
}

func wrap(what, item string, err error) error {
	if ddbcore.IsThrottle(err) {
		return fmt.Errorf("dynamostore: %s %q: %w: %w", what, item, inflight.ErrThrottled, err)
	}
	return fmt.Errorf("dynamostore: %s %q: %w", what, item, err)
}
