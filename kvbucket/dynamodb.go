package kvbucket

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit/internal/ddb"
)

// Attribute names of a bucket item, next to ddb.AttrPK and ddb.AttrExpiresAt.
const (
	// AttrTAT holds Part.TAT (bucket units, up to 38 digits).
	AttrTAT = "tat"
	// AttrSpent holds Part.Spent (tokens).
	AttrSpent = "spent"
	// AttrVersion holds Part.Version.
	AttrVersion = "ver"
	// AttrWritersPrefix starts the attribute of each epoch's writers: a
	// number set named "w<epoch>".
	AttrWritersPrefix = "w"
)

// ItemPrefix starts the partition key of every kvbucket item:
// "kv#<policy>#<keyhash>", and "kv#<policy>#<keyhash>@<region>" for each
// region's part when DynamoDBConfig.Regions is set.
const ItemPrefix = "kv#"

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

// DynamoDBAPI is the part of *dynamodb.Client that DynamoDB uses.
// BatchGetItem reads the regions' parts of a bucket spread over regions.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// DynamoDBConfig configures NewDynamoDB.
type DynamoDBConfig struct {
	// Client calls DynamoDB. Required: a *dynamodb.Client from
	// internal/ddb.NewClient, or a fake for error paths.
	Client DynamoDBAPI
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
	// the budget out. Default DefaultRetryBackoff (10 ms, as durablecounter's
	// DynamoConfig); negative leaves the client's retryer as it is.
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

// DefaultRetryBackoff is DynamoDBConfig.RetryBackoff's default.
const DefaultRetryBackoff = 10 * time.Millisecond

// DynamoDB is a KV on one DynamoDB table: one item per bucket (per region
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
type DynamoDB struct {
	client DynamoDBAPI
	table  *string
	now    func() time.Time
	region string
	// regions are the item suffixes of every region's part: own first,
	// "" alone without Regions.
	regions []string
	// opts go with every call (the capped retry back-off).
	opts []func(*dynamodb.Options)
}

var _ KV = (*DynamoDB)(nil)

var regionName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// NewDynamoDB checks cfg and returns the KV.
func NewDynamoDB(cfg DynamoDBConfig) (*DynamoDB, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: DynamoDBConfig.Client is required", ErrBadConfig)
	}
	if cfg.Table == "" {
		return nil, fmt.Errorf("%w: DynamoDBConfig.Table is required", ErrBadConfig)
	}
	d := &DynamoDB{client: cfg.Client, table: aws.String(cfg.Table), now: cfg.Now, regions: []string{""}}
	if cfg.Region != "" || len(cfg.Regions) > 0 {
		if !slices.Contains(cfg.Regions, cfg.Region) {
			return nil, fmt.Errorf("%w: DynamoDBConfig.Region %q is not among Regions %q", ErrBadConfig, cfg.Region, cfg.Regions)
		}
		d.region = cfg.Region
		d.regions = []string{cfg.Region}
		for _, r := range cfg.Regions {
			if !regionName.MatchString(r) {
				return nil, fmt.Errorf("%w: DynamoDBConfig.Regions: %q is not a region name", ErrBadConfig, r)
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
	return map[string]types.AttributeValue{ddb.AttrPK: &types.AttributeValueMemberS{Value: pk}}
}

// Get reads key's parts: eventually consistent unless c is Strong.
func (d *DynamoDB) Get(ctx context.Context, key string, c Consistency) (Tally, error) {
	if len(d.regions) == 1 {
		own, err := d.getOwn(ctx, key, c == Strong)
		return Tally{Own: own}, err
	}
	return d.getAll(ctx, key, d.regions, c == Strong)
}

func (d *DynamoDB) getOwn(ctx context.Context, key string, strong bool) (Part, error) {
	id := pk(key, d.region)
	out, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: d.table, Key: keyOf(id), ConsistentRead: aws.Bool(strong),
	}, d.opts...)
	if err != nil {
		return Part{}, d.wrap("GetItem", id, err)
	}
	if out == nil {
		return Part{}, nil
	}
	p, err := parsePart(out.Item)
	if err != nil {
		return Part{}, fmt.Errorf("kvbucket: GetItem %q: %w", id, err)
	}
	return p, nil
}

// maxBatchRounds bounds the BatchGetItem calls of one read when DynamoDB
// leaves keys unprocessed (throttling).
const maxBatchRounds = 3

// getAll reads the parts of key in regions with BatchGetItem; the first
// region's is Own when it is this one's.
func (d *DynamoDB) getAll(ctx context.Context, key string, regions []string, strong bool) (Tally, error) {
	keys := make([]map[string]types.AttributeValue, len(regions))
	byPK := map[string]int{}
	for i, r := range regions {
		keys[i] = keyOf(pk(key, r))
		byPK[pk(key, r)] = i
	}
	parts := make([]Part, len(regions))
	pending := &types.KeysAndAttributes{Keys: keys, ConsistentRead: aws.Bool(strong)}
	id := pk(key, regions[0])
	for round := 0; pending != nil && len(pending.Keys) > 0; round++ {
		if round == maxBatchRounds {
			return Tally{}, fmt.Errorf("kvbucket: BatchGetItem %q: %w: keys left unprocessed %d times", id, ErrThrottled, round)
		}
		out, err := d.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
			RequestItems: map[string]types.KeysAndAttributes{*d.table: *pending},
		}, d.opts...)
		if err != nil {
			return Tally{}, d.wrap("BatchGetItem", id, err)
		}
		pending = nil
		if out == nil {
			break
		}
		for _, item := range out.Responses[*d.table] {
			s, _ := item[ddb.AttrPK].(*types.AttributeValueMemberS)
			if s == nil {
				continue
			}
			i, ok := byPK[s.Value]
			if !ok {
				continue
			}
			p, err := parsePart(item)
			if err != nil {
				return Tally{}, fmt.Errorf("kvbucket: BatchGetItem %q: %w", s.Value, err)
			}
			parts[i] = p
		}
		if u, ok := out.UnprocessedKeys[*d.table]; ok && len(u.Keys) > 0 {
			pending = &u
		}
	}
	t := Tally{Others: parts[1:]}
	if regions[0] == d.region {
		t.Own = parts[0]
	} else {
		t.Others = parts
	}
	return t, nil
}

// Update applies u to this region's item (see KV.Update and Update).
func (d *DynamoDB) Update(ctx context.Context, key string, u Update) (Tally, error) {
	id := pk(key, d.region)
	if u.HasCap {
		_, err := d.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: d.table, Key: keyOf(id),
			UpdateExpression:          aws.String("SET #t = :cap ADD #v :one"),
			ConditionExpression:       aws.String("#t > :cap"),
			ExpressionAttributeNames:  map[string]string{"#t": AttrTAT, "#v": AttrVersion},
			ExpressionAttributeValues: map[string]types.AttributeValue{":cap": wideN(u.Cap), ":one": num(1)},
		}, d.opts...)
		if err != nil && !ddb.IsConditionFailed(err) {
			return Tally{}, d.wrap("UpdateItem", id, err)
		}
	}
	// Which form applies depends on the TAT at the moment the update lands:
	// the caller's guess goes first; when it fails its condition, the state
	// that failed it (returned by DynamoDB and moto; dynalite ignores
	// ReturnValuesOnConditionCheckFailure, so then the other form is tried,
	// and after that the item read) says whether the update fits at all and
	// which form to try next.
	raise := u.HasFloor && u.RaiseFirst
	var t Tally
	for attempt := 0; ; attempt++ {
		if attempt == maxUpdateAttempts {
			return Tally{}, fmt.Errorf("kvbucket: UpdateItem %q: %w: the item changed under %d attempts", id, ErrThrottled, attempt)
		}
		out, err := d.client.UpdateItem(ctx, d.updateInput(id, u, raise), d.opts...)
		if err == nil {
			if t.Own, err = parsePart(out.Attributes); err != nil {
				return Tally{}, fmt.Errorf("kvbucket: UpdateItem %q: %w", id, err)
			}
			t.Applied = true
			break
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return Tally{}, d.wrap("UpdateItem", id, err)
		}
		var old Part
		switch {
		case ccf.Item != nil:
			if old, err = parsePart(ccf.Item); err != nil {
				return Tally{}, fmt.Errorf("kvbucket: UpdateItem %q: %w", id, err)
			}
		case attempt == 0 && u.HasFloor:
			raise = !raise // the guess was wrong, most likely
			continue
		default:
			if old, err = d.getOwn(ctx, key, true); err != nil {
				return Tally{}, err
			}
		}
		t.Own = old
		if !u.fits(old) {
			break // not applied: the state that failed it is the answer
		}
		raise = u.HasFloor && (!old.Has || old.TAT.Less(u.Floor))
	}
	if len(d.regions) > 1 {
		o, err := d.getAll(ctx, key, d.regions[1:], false)
		if err != nil {
			return Tally{}, err
		}
		t.Others = o.Others
	}
	return t, nil
}

// updateInput is the UpdateItem of u: the raise form (SET the TAT to its
// floor plus the addition, if it is below the floor) or the add form (ADD,
// if it is not), each with u's fit condition.
func (d *DynamoDB) updateInput(id string, u Update, raise bool) *dynamodb.UpdateItemInput {
	ttl := min(max(u.TTL, 0), maxTTL)
	if len(d.regions) > 1 {
		// A region's part must outlive the others' spending it was raised
		// against (see the package documentation, Accuracy).
		ttl = max(ttl, MinRegionTTL)
	}
	exp := d.now().Add(ttl + time.Second - 1).Unix()
	names := map[string]string{"#t": AttrTAT, "#s": AttrSpent, "#x": ddb.AttrExpiresAt, "#v": AttrVersion}
	values := map[string]types.AttributeValue{
		":ds":  num(u.Spent),
		":exp": num(exp),
		":one": num(1),
		":vb":  num(d.now().UnixNano()),
	}
	var set, add, cond []string
	set = append(set, "#x = :exp", "#v = if_not_exists(#v, :vb) + :one")
	if raise {
		values[":tr"] = wideN(u.Floor.Add(u.Add))
		values[":f"] = wideN(u.Floor)
		set = append(set, "#t = :tr")
		cond = append(cond, "(attribute_not_exists(#t) OR #t < :f)")
	} else {
		values[":a"] = wideN(u.Add)
		add = append(add, "#t :a")
		if u.HasFloor {
			values[":f"] = wideN(u.Floor)
			cond = append(cond, "#t >= :f")
		}
		if u.Conditional {
			values[":mt"] = wideN(u.MaxTAT)
			cond = append(cond, "#t <= :mt")
		}
	}
	if u.Conditional && u.HasMaxSpent {
		values[":ms"] = num(u.MaxSpent)
		cond = append(cond, "(attribute_not_exists(#s) OR #s <= :ms)")
	}
	add = append(add, "#s :ds")
	if u.Writer != 0 {
		names["#w"] = writersAttr(u.Epoch)
		values[":id"] = &types.AttributeValueMemberNS{Value: []string{strconv.FormatUint(uint64(u.Writer), 10)}}
		add = append(add, "#w :id")
	}
	var remove []string
	stale := append([]int64{u.Epoch - 2}, u.Stale...)
	slices.Sort(stale)
	for i, e := range slices.Compact(stale) {
		if e >= u.Epoch-1 {
			continue
		}
		n := "#r" + strconv.Itoa(i)
		names[n] = writersAttr(e)
		remove = append(remove, n)
	}
	expr := "SET " + strings.Join(set, ", ") + " ADD " + strings.Join(add, ", ")
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	in := &dynamodb.UpdateItemInput{
		TableName: d.table, Key: keyOf(id),
		UpdateExpression:                    aws.String(expr),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if len(cond) > 0 {
		in.ConditionExpression = aws.String(strings.Join(cond, " AND "))
	}
	return in
}

func writersAttr(epoch int64) string { return AttrWritersPrefix + strconv.FormatInt(epoch, 10) }

func wideN(w Wide) types.AttributeValue { return &types.AttributeValueMemberN{Value: w.String()} }

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func (d *DynamoDB) wrap(op, pk string, err error) error {
	if ddb.IsThrottle(err) {
		return fmt.Errorf("kvbucket: %s %q: %w: %w", op, pk, ErrThrottled, err)
	}
	return fmt.Errorf("kvbucket: %s %q: %w", op, pk, err)
}

// parsePart reads a bucket item; a nil or empty item is an empty part.
func parsePart(item map[string]types.AttributeValue) (Part, error) {
	var p Part
	if v, ok := item[AttrTAT]; ok {
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			return Part{}, fmt.Errorf("%w: attribute %s is not a number", ErrBadItem, AttrTAT)
		}
		w, err := ParseWide(n.Value)
		if err != nil {
			return Part{}, fmt.Errorf("%w: attribute %s: %v", ErrBadItem, AttrTAT, err)
		}
		p.Has, p.TAT = true, w
	}
	if v, ok := item[AttrSpent]; ok {
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			return Part{}, fmt.Errorf("%w: attribute %s is not a number", ErrBadItem, AttrSpent)
		}
		s, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return Part{}, fmt.Errorf("%w: attribute %s = %.32q is not a 64-bit integer", ErrBadItem, AttrSpent, n.Value)
		}
		p.Spent = s
	}
	if v, ok := item[AttrVersion]; ok {
		n, ok := v.(*types.AttributeValueMemberN)
		var err error
		if ok {
			p.Version, err = strconv.ParseInt(n.Value, 10, 64)
		}
		if !ok || err != nil {
			return Part{}, fmt.Errorf("%w: attribute %s is not a 64-bit integer", ErrBadItem, AttrVersion)
		}
	}
	for name, v := range item {
		e, ok := writersEpoch(name)
		if !ok {
			continue
		}
		ns, ok := v.(*types.AttributeValueMemberNS)
		if !ok {
			return Part{}, fmt.Errorf("%w: attribute %s is not a number set", ErrBadItem, name)
		}
		for _, s := range ns.Value {
			id, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return Part{}, fmt.Errorf("%w: attribute %s holds %.16q, not a writer", ErrBadItem, name, s)
			}
			p.Writers = append(p.Writers, Writer{Epoch: e, ID: uint32(id)})
		}
	}
	return p, nil
}

// writersEpoch parses "w<epoch>".
func writersEpoch(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, AttrWritersPrefix)
	if !ok || rest == "" || rest[0] < '0' && rest[0] != '-' || rest[0] > '9' {
		return 0, false
	}
	e, err := strconv.ParseInt(rest, 10, 64)
	return e, err == nil
}
