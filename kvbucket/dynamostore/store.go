package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit/internal/ddb/ddbcore"
	"github.com/edgelimit/edgelimit/kvbucket"
)

// maxUpdateAttempts bounds the UpdateItem calls of one Update when
// concurrent writers keep changing which form applies (each attempt after
// the first follows a change of the item).
const maxUpdateAttempts = 4

// MinRegionTTL is the shortest lifetime of a region's part of a bucket in
// a table spread over regions: when a part expires and TTL deletes it, its
// spending vanishes from the other regions' sum, and a bucket they had
// spent can come back full once. Parts of keys idle for less than this
// never vanish.
const MinRegionTTL = 24 * time.Hour

// maxTTL caps an item's lifetime (ten years), keeping expires_at sane for
// buckets that take longer than that to refill.
const maxTTL = 10 * 365 * 24 * time.Hour

// DynamoAPI is the part of *dynamodb.Client that a Store uses.
// BatchGetItem reads the regions' parts of a bucket spread over regions.
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// Config configures New.
type Config struct {
	// Client calls DynamoDB. Required: normally a *dynamodb.Client (the
	// example functions build theirs from Lambda's environment, see
	// setup/dynamodb), or a fake for error paths.
	Client DynamoAPI
	// Table is the edgelimit table (partition key pk, TTL on expires_at),
	// shared with the durable strategy. Required.
	Table string
	// Now is the clock that sets expires_at; default time.Now.
	Now func() time.Time
	// RetryBackoff caps how long the SDK waits before it retries a failed
	// call (throttling, a dropped connection), so that its retries fit in
	// the policy's store_timeout (default 100 ms) instead of outlasting it:
	// the SDK's own back-off is up to seconds (up to 20 s). Retries stay
	// bounded by the client's attempts (4 for a DynamoDB client by default,
	// so 3 back-offs) and by the engine's time budget: a throttled call
	// fails after its attempts, well inside the budget, instead of waiting
	// the budget out. Default DefaultRetryBackoff (10 ms, as
	// durablecounter/dynamostore's); negative leaves the client's retryer
	// as it is.
	RetryBackoff time.Duration
	// Region, for a table replicated over regions (a DynamoDB Global
	// Table), names this region's part of every bucket: this region writes
	// only items "…@<Region>", so that replication, which keeps the last
	// writer's copy of an item, never has two regions' writes of one item to
	// choose between. Empty (the default): one region, one item per bucket.
	Region string
	// Regions are all the regions whose parts a bucket sums, Region
	// included; required with Region. Names are letters, digits, '-' and
	// '_' (AWS region names, as AWS_REGION gives them).
	Regions []string
}

// DefaultRetryBackoff is Config.RetryBackoff's default.
const DefaultRetryBackoff = 10 * time.Millisecond

// Store is a kvbucket.KV on one DynamoDB table: one item per bucket (per region
// and bucket with Regions), updated with one UpdateItem, read with an
// eventually consistent GetItem (strongly consistent when asked, and
// BatchGetItem over the regions' items).
//
// An Update is one UpdateItem in the common case: an ADD of the spending to
// the TAT, which needs no condition and commutes with every other
// instance's; after an idle period (the bucket had refilled), a SET of the
// TAT to its floor under the condition that it is below it. When the
// caller's guess of which one applies is wrong, the other follows (two
// calls); a conditional update that does not fit changes nothing. Items
// carry expires_at, so the table's TTL deletes idle buckets: an item past
// its expires_at reads as a full bucket anyway (its TAT is in the past).
type Store struct {
	// inner is kvbucket's KV on this package's conn: embedding it makes
	// *Store a kvbucket.KV, whose methods are sealed.
	inner
}

type inner = kvbucket.KV

var _ kvbucket.KV = (*Store)(nil)

// conn is the table as the bucket protocol uses it (wire.KV): which
// UpdateItem to send for an Update, and the items' attributes (item.go).
type conn struct {
	client DynamoAPI
	table  *string
	now    func() time.Time
	region string
	// regions are the item suffixes of every region's part: own first,
	// "" alone without Regions.
	regions []string
	// opts go with every call (the capped retry back-off).
	opts []func(*dynamodb.Options)
}

var _ wire.KV = (*conn)(nil)

// validRegion reports a region name as Config.Regions takes it: 1-64
// characters of A-Z, a-z, 0-9, _ and - (the regular expression
// ^[A-Za-z0-9_-]{1,64}$, which TestValidRegionIsTheRegexp checks). Not a
// regexp: compiling that one at package init cost every cold start of a kv
// function 60 KB in 860 allocations and a third of a millisecond.
func validRegion(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// New checks cfg and returns the Store. It makes no call: use
// internal/ddb.CheckTable (or `edgelimit serve --create-table`) to check
// the table. Its errors wrap kvbucket.ErrConfig.
func New(cfg Config) (*Store, error) {
	c, err := newConn(cfg)
	if err != nil {
		return nil, err
	}
	return c.store(), nil
}

// store returns the Store on c.
func (d *conn) store() *Store { return &Store{inner: wire.NewKV(d).(kvbucket.KV)} }

func newConn(cfg Config) (*conn, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: dynamostore: Config.Client is required", kvbucket.ErrConfig)
	}
	if cfg.Table == "" {
		return nil, fmt.Errorf("%w: dynamostore: Config.Table is required", kvbucket.ErrConfig)
	}
	d := &conn{client: cfg.Client, table: aws.String(cfg.Table), now: cfg.Now, regions: []string{""}}
	if cfg.Region != "" || len(cfg.Regions) > 0 {
		if !slices.Contains(cfg.Regions, cfg.Region) {
			return nil, fmt.Errorf("%w: dynamostore: Config.Region %q is not among Regions %q", kvbucket.ErrConfig, cfg.Region, cfg.Regions)
		}
		d.region = cfg.Region
		d.regions = []string{cfg.Region}
		for _, r := range cfg.Regions {
			if !validRegion(r) {
				return nil, fmt.Errorf("%w: dynamostore: Config.Regions: %q is not a region name", kvbucket.ErrConfig, r)
			}
			if !slices.Contains(d.regions, r) {
				d.regions = append(d.regions, r)
			}
		}
	}
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

// pk returns the partition key of key's part in region ("" alone).
func pk(key, region string) string {
	if region == "" {
		return ItemPrefix + key
	}
	return ItemPrefix + key + "@" + region
}

func keyOf(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{ddbcore.AttrPK: &types.AttributeValueMemberS{Value: pk}}
}

// Get reads key's parts: eventually consistent unless c is Strong.
func (d *conn) Get(ctx context.Context, key string, c wire.Consistency) (wire.Tally, error) {
	if len(d.regions) == 1 {
		own, err := d.getOwn(ctx, key, c == wire.Strong)
		return wire.Tally{Own: own}, err
	}
	return d.getAll(ctx, key, d.regions, c == wire.Strong)
}

func (d *conn) getOwn(ctx context.Context, key string, strong bool) (wire.Part, error) {
	id := pk(key, d.region)
	out, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: d.table, Key: keyOf(id), ConsistentRead: aws.Bool(strong),
	}, d.opts...)
	if err != nil {
		return wire.Part{}, d.wrap("GetItem", id, err)
	}
	if out == nil {
		return wire.Part{}, nil
	}
	p, err := parsePart(out.Item)
	if err != nil {
		return wire.Part{}, fmt.Errorf("kvbucket/dynamostore: GetItem %q: %w", id, err)
	}
	return p, nil
}

// maxBatchRounds bounds the BatchGetItem calls of one read when DynamoDB
// leaves keys unprocessed (throttling).
const maxBatchRounds = 3

// getAll reads the parts of key in regions with BatchGetItem; the first
// region's is Own when it is this one's.
func (d *conn) getAll(ctx context.Context, key string, regions []string, strong bool) (wire.Tally, error) {
	keys := make([]map[string]types.AttributeValue, len(regions))
	byPK := map[string]int{}
	for i, r := range regions {
		keys[i] = keyOf(pk(key, r))
		byPK[pk(key, r)] = i
	}
	parts := make([]wire.Part, len(regions))
	pending := &types.KeysAndAttributes{Keys: keys, ConsistentRead: aws.Bool(strong)}
	id := pk(key, regions[0])
	for round := 0; pending != nil && len(pending.Keys) > 0; round++ {
		if round == maxBatchRounds {
			return wire.Tally{}, fmt.Errorf("kvbucket/dynamostore: BatchGetItem %q: %w: keys left unprocessed %d times", id, kvbucket.ErrThrottled, round)
		}
		out, err := d.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
			RequestItems: map[string]types.KeysAndAttributes{*d.table: *pending},
		}, d.opts...)
		if err != nil {
			return wire.Tally{}, d.wrap("BatchGetItem", id, err)
		}
		pending = nil
		if out == nil {
			break
		}
		for _, item := range out.Responses[*d.table] {
			s, _ := item[ddbcore.AttrPK].(*types.AttributeValueMemberS)
			if s == nil {
				continue
			}
			i, ok := byPK[s.Value]
			if !ok {
				continue
			}
			p, err := parsePart(item)
			if err != nil {
				return wire.Tally{}, fmt.Errorf("kvbucket/dynamostore: BatchGetItem %q: %w", s.Value, err)
			}
			parts[i] = p
		}
		if u, ok := out.UnprocessedKeys[*d.table]; ok && len(u.Keys) > 0 {
			pending = &u
		}
	}
	t := wire.Tally{Others: parts[1:]}
	if regions[0] == d.region {
		t.Own = parts[0]
	} else {
		t.Others = parts
	}
	return t, nil
}

// Update applies u to this region's item (see KV.Update and Update).
func (d *conn) Update(ctx context.Context, key string, u wire.Update) (wire.Tally, error) {
	id := pk(key, d.region)
	if u.HasCap {
		_, err := d.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: d.table, Key: keyOf(id),
			UpdateExpression:          aws.String("SET #t = :cap ADD #v :one"),
			ConditionExpression:       aws.String("#t > :cap"),
			ExpressionAttributeNames:  map[string]string{"#t": AttrTAT, "#v": AttrVersion},
			ExpressionAttributeValues: map[string]types.AttributeValue{":cap": wideN(u.Cap), ":one": num(1)},
		}, d.opts...)
		if err != nil && !ddbcore.IsConditionFailed(err) {
			return wire.Tally{}, d.wrap("UpdateItem", id, err)
		}
	}
	if u.Grant > 0 {
		return d.grant(ctx, key, id, u)
	}
	// Which form applies depends on the TAT at the moment the update lands:
	// the caller's guess goes first; when it fails its condition, the state
	// that failed it (returned by DynamoDB and moto; dynalite ignores
	// ReturnValuesOnConditionCheckFailure, so then the other form is tried,
	// and after that the item read) says whether the update fits at all and
	// which form to try next.
	raise := u.HasFloor && u.RaiseFirst
	var t wire.Tally
	for attempt := 0; ; attempt++ {
		if attempt == maxUpdateAttempts {
			return wire.Tally{}, fmt.Errorf("kvbucket/dynamostore: UpdateItem %q: %w: the item changed under %d attempts", id, kvbucket.ErrThrottled, attempt)
		}
		out, err := d.client.UpdateItem(ctx, d.updateInput(id, u, raise), d.opts...)
		if err == nil {
			if t.Own, err = parsePart(out.Attributes); err != nil {
				return wire.Tally{}, fmt.Errorf("kvbucket/dynamostore: UpdateItem %q: %w", id, err)
			}
			t.Applied = true
			break
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return wire.Tally{}, d.wrap("UpdateItem", id, err)
		}
		var old wire.Part
		switch {
		case ccf.Item != nil:
			if old, err = parsePart(ccf.Item); err != nil {
				return wire.Tally{}, fmt.Errorf("kvbucket/dynamostore: UpdateItem %q: %w", id, err)
			}
		case attempt == 0 && u.HasFloor:
			raise = !raise // the guess was wrong, most likely
			continue
		default:
			if old, err = d.getOwn(ctx, key, true); err != nil {
				return wire.Tally{}, err
			}
		}
		t.Own = old
		if !u.Fits(old) {
			break // not applied: the state that failed it is the answer
		}
		raise = u.HasFloor && (!old.Has || old.TAT.Less(u.Floor))
	}
	if len(d.regions) > 1 {
		o, err := d.getAll(ctx, key, d.regions[1:], false)
		if err != nil {
			return wire.Tally{}, err
		}
		t.Others = o.Others
	}
	return t, nil
}

// grant applies a grant (Update.Grant: nothing else of u is written): the
// first of its forms whose condition holds, which concurrent grants can
// change between calls.
func (d *conn) grant(ctx context.Context, key, id string, u wire.Update) (wire.Tally, error) {
	ins := d.grantInputs(id, u)
	for attempt := 0; attempt < maxUpdateAttempts; attempt++ {
		for _, in := range ins {
			out, err := d.client.UpdateItem(ctx, in, d.opts...)
			if ddbcore.IsConditionFailed(err) {
				continue
			}
			if err != nil {
				return wire.Tally{}, d.wrap("UpdateItem", id, err)
			}
			t := wire.Tally{Applied: true}
			if t.Own, err = parsePart(out.Attributes); err != nil {
				return wire.Tally{}, fmt.Errorf("kvbucket/dynamostore: UpdateItem %q: %w", id, err)
			}
			if len(d.regions) > 1 {
				o, err := d.getAll(ctx, key, d.regions[1:], false)
				if err != nil {
					return wire.Tally{}, err
				}
				t.Others = o.Others
			}
			return t, nil
		}
	}
	return wire.Tally{}, fmt.Errorf("kvbucket/dynamostore: UpdateItem %q: %w: the grant changed under %d attempts", id, kvbucket.ErrThrottled, maxUpdateAttempts)
}

func (d *conn) wrap(op, pk string, err error) error {
	if ddbcore.IsThrottle(err) {
		return fmt.Errorf("kvbucket/dynamostore: %s %q: %w: %w", op, pk, kvbucket.ErrThrottled, err)
	}
	return fmt.Errorf("kvbucket/dynamostore: %s %q: %w", op, pk, err)
}
