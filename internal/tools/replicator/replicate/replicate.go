// Package replicate copies the items of one DynamoDB table to another and
// back, a fixed lag after it sees them change: a model of a DynamoDB Global
// Table's replication between two regions, for local servers (dynalite,
// moto) that have none.
//
// What it models: each region writes its own replica; every change of an
// item reaches the other replica lag later, as a copy of the whole item
// (PutItem) that replaces whatever the other replica holds; when both
// regions changed one item within the lag, the later change wins in both
// (last writer wins per item), the other is lost; deletions replicate as
// deletions. That is Global Tables' multi-region eventual consistency
// (MREC): per-item last writer wins, no merge of attributes, replication
// typically within a second or two.
//
// What it does not model: the lag is fixed (Global Tables' varies, and
// grows under load or a region's outage); "later" is the order in which
// this process saw the changes, at its poll interval, not DynamoDB's own
// write timestamps, so two changes within one poll of each other may be
// ordered either way; it sees only the last state of an item at each poll
// (several writes within one poll replicate as one, as they would if
// coalesced); it replicates whole tables by scanning them, so it is for
// small test tables only; strongly consistent reads across regions and the
// multi-region strong consistency mode (MRSC) are not modelled at all.
package replicate

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit/internal/ddb"
)

// API is the part of *dynamodb.Client the replicator uses.
type API interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Replica is one region's table.
type Replica struct {
	Name   string // for the stats, e.g. "a"
	Client API
	Table  string
}

// Config configures New.
type Config struct {
	// A and B are the two regions' tables. Required.
	A, B Replica
	// Lag is how long after it is seen a change reaches the other replica.
	// Default 1s.
	Lag time.Duration
	// Poll is how often both tables are scanned; default 50ms. Changes are
	// seen (and ordered) at this granularity.
	Poll time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Stats are a replicator's counters.
type Stats struct {
	// Copied counts the items copied, by the region they came from.
	Copied map[string]int64 `json:"copied"`
	// Deleted counts deletions replicated, by the region they came from.
	Deleted map[string]int64 `json:"deleted"`
	// Superseded counts changes not copied because the other region
	// changed the item later: updates lost to last writer wins (the other
	// region's later copy replaces them where they were made, too).
	Superseded int64 `json:"superseded"`
	// Scans counts the polls.
	Scans int64 `json:"scans"`
}

// Replicator copies changes between two replicas. Run it with Run.
type Replicator struct {
	cfg   Config
	side  [2]*side
	queue []change // copies not due yet
	mu    sync.Mutex
	st    Stats
}

// side is what the replicator knows of one replica.
type side struct {
	r Replica
	// seen is each item's fingerprint at the last scan.
	seen map[string][32]byte
	// wrote is the fingerprint of the last copy written here, so that a
	// copy is not taken for a change of this region.
	wrote map[string][32]byte
	// changedAt is when this region's last own change of an item was seen.
	changedAt map[string]time.Time
}

// change is a copy due to the other replica.
type change struct {
	due  time.Time
	seen time.Time
	from int
	pk   string
	item map[string]types.AttributeValue // nil: deleted
}

// New checks cfg and returns the replicator.
func New(cfg Config) (*Replicator, error) {
	if cfg.A.Client == nil || cfg.B.Client == nil || cfg.A.Table == "" || cfg.B.Table == "" {
		return nil, errors.New("replicate: both replicas need a client and a table")
	}
	if cfg.Lag <= 0 {
		cfg.Lag = time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.A.Name == "" {
		cfg.A.Name = "a"
	}
	if cfg.B.Name == "" {
		cfg.B.Name = "b"
	}
	r := &Replicator{cfg: cfg, st: Stats{Copied: map[string]int64{}, Deleted: map[string]int64{}}}
	for i, rep := range []Replica{cfg.A, cfg.B} {
		r.side[i] = &side{r: rep, seen: map[string][32]byte{}, wrote: map[string][32]byte{}, changedAt: map[string]time.Time{}}
	}
	return r, nil
}

// Stats returns the counters so far.
func (r *Replicator) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.st
	s.Copied, s.Deleted = map[string]int64{}, map[string]int64{}
	for k, v := range r.st.Copied {
		s.Copied[k] = v
	}
	for k, v := range r.st.Deleted {
		s.Deleted[k] = v
	}
	return s
}

// Run replicates until ctx ends, and returns nil then; an error of a
// server ends it early. It stops between polls, never in the middle of a
// call (a request aborted half-way crashes dynalite).
func (r *Replicator) Run(ctx context.Context) error {
	tick := time.NewTicker(r.cfg.Poll)
	defer tick.Stop()
	calls := context.WithoutCancel(ctx)
	for {
		if err := r.Step(calls); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Step polls once at Config.Now: it scans both replicas for changes and
// copies those that are due. Run calls it every Poll; a test may call it
// itself, on a fake clock.
func (r *Replicator) Step(ctx context.Context) error {
	now := r.cfg.Now()
	for i := range r.side {
		cs, err := r.scan(ctx, i, now)
		if err != nil {
			return err
		}
		r.queue = append(r.queue, cs...)
	}
	sort.SliceStable(r.queue, func(i, j int) bool { return r.queue[i].due.Before(r.queue[j].due) })
	n := 0
	for ; n < len(r.queue) && !r.queue[n].due.After(now); n++ {
		if err := r.apply(ctx, r.queue[n]); err != nil {
			r.queue = r.queue[n:]
			return err
		}
	}
	r.queue = r.queue[n:]
	r.mu.Lock()
	r.st.Scans++
	r.mu.Unlock()
	return nil
}

// scan reads replica i and returns its own changes since the last scan.
func (r *Replicator) scan(ctx context.Context, i int, now time.Time) ([]change, error) {
	s := r.side[i]
	items := map[string]map[string]types.AttributeValue{}
	var start map[string]types.AttributeValue
	for {
		out, err := s.r.Client.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.r.Table), ConsistentRead: aws.Bool(true), ExclusiveStartKey: start})
		if err != nil {
			return nil, fmt.Errorf("replicate: scan %s (%s): %w", s.r.Name, s.r.Table, err)
		}
		for _, it := range out.Items {
			if pk, ok := it[ddb.AttrPK].(*types.AttributeValueMemberS); ok {
				items[pk.Value] = it
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	var cs []change
	for pk, it := range items {
		fp := fingerprint(it)
		if old, ok := s.seen[pk]; ok && old == fp {
			continue
		}
		s.seen[pk] = fp
		if w, ok := s.wrote[pk]; ok && w == fp {
			continue // our own copy
		}
		s.changedAt[pk] = now
		cs = append(cs, change{due: now.Add(r.cfg.Lag), seen: now, from: i, pk: pk, item: it})
	}
	for pk := range s.seen {
		if _, ok := items[pk]; ok {
			continue
		}
		delete(s.seen, pk)
		s.changedAt[pk] = now
		cs = append(cs, change{due: now.Add(r.cfg.Lag), seen: now, from: i, pk: pk})
	}
	return cs, nil
}

// apply writes change c to the other replica, unless that replica changed
// the item after c was seen (then c lost to last writer wins).
func (r *Replicator) apply(ctx context.Context, c change) error {
	src, dst := r.side[c.from], r.side[1-c.from]
	if later := dst.changedAt[c.pk]; later.After(c.seen) {
		r.mu.Lock()
		r.st.Superseded++
		r.mu.Unlock()
		return nil
	}
	if c.item == nil {
		if _, err := dst.r.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(dst.r.Table),
			Key:       map[string]types.AttributeValue{ddb.AttrPK: &types.AttributeValueMemberS{Value: c.pk}},
		}); err != nil {
			return fmt.Errorf("replicate: delete %q in %s: %w", c.pk, dst.r.Name, err)
		}
		delete(dst.wrote, c.pk)
		delete(dst.seen, c.pk)
	} else {
		if _, err := dst.r.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(dst.r.Table), Item: c.item}); err != nil {
			return fmt.Errorf("replicate: copy %q to %s: %w", c.pk, dst.r.Name, err)
		}
		dst.wrote[c.pk] = fingerprint(c.item)
	}
	// The receiving replica holds the other's version now: its own change,
	// if it had one, is gone.
	delete(dst.changedAt, c.pk)
	r.mu.Lock()
	if c.item == nil {
		r.st.Deleted[src.r.Name]++
	} else {
		r.st.Copied[src.r.Name]++
	}
	r.mu.Unlock()
	return nil
}

// fingerprint hashes an item's attributes (the SDK's values marshal to
// JSON deterministically: map keys sorted).
func fingerprint(item map[string]types.AttributeValue) [32]byte {
	b, _ := json.Marshal(plain(item))
	return sha256.Sum256(b)
}

// plain turns attribute values into JSON-friendly values.
func plain(item map[string]types.AttributeValue) map[string]any {
	out := make(map[string]any, len(item))
	for k, v := range item {
		out[k] = plainValue(v)
	}
	return out
}

func plainValue(v types.AttributeValue) any {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return map[string]string{"S": x.Value}
	case *types.AttributeValueMemberN:
		return map[string]string{"N": x.Value}
	case *types.AttributeValueMemberB:
		return map[string][]byte{"B": x.Value}
	case *types.AttributeValueMemberBOOL:
		return map[string]bool{"BOOL": x.Value}
	case *types.AttributeValueMemberNULL:
		return map[string]bool{"NULL": x.Value}
	case *types.AttributeValueMemberSS:
		s := append([]string(nil), x.Value...)
		sort.Strings(s)
		return map[string][]string{"SS": s}
	case *types.AttributeValueMemberNS:
		s := append([]string(nil), x.Value...)
		sort.Strings(s)
		return map[string][]string{"NS": s}
	case *types.AttributeValueMemberBS:
		return map[string][][]byte{"BS": x.Value}
	case *types.AttributeValueMemberL:
		l := make([]any, len(x.Value))
		for i, e := range x.Value {
			l[i] = plainValue(e)
		}
		return map[string][]any{"L": l}
	case *types.AttributeValueMemberM:
		return map[string]any{"M": plain(x.Value)}
	}
	return nil
}
