package dynamostore

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// DynamoAPI is the part of *dynamodb.Client that a Store uses.
type DynamoAPI interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// TransactionMode says how a Store commits a batch (several policies on one
// request, see durablecounter.Counter.AllowBatch).
type TransactionMode uint8

const (
	// TransactionsAuto, the default, commits a batch with one
	// TransactWriteItems. The first time the server answers that it does
	// not implement it (dynalite: UnknownOperationException), the store
	// switches to the sequential fallback of TransactionsOff for good,
	// starting with that batch. Real DynamoDB and moto never switch.
	TransactionsAuto TransactionMode = iota
	// TransactionsRequired always uses TransactWriteItems; a server without
	// it makes AllowBatch fail with durablecounter.ErrNoTransactions.
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

// Config configures a Store.
type Config struct {
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
	// update from this instance's last view of the item (see the
	// durablecounter documentation). Each item counts 1, plus 1 per
	// millisecond bucket of a sliding log. Default 262,144 (a few tens of
	// MB at most); negative disables the views, which costs a second call
	// on most decisions of those algorithms.
	ViewCacheSize int
}

// Defaults of Config.
const (
	DefaultExpiryMargin  = time.Minute
	DefaultRetryBackoff  = 10 * time.Millisecond
	DefaultViewCacheSize = 1 << 18
)

// Store is a durablecounter.Store on a DynamoDB table, shared by every
// instance that uses the table. See the package documentation.
type Store struct {
	// inner is durablecounter's store on this package's conn: it
	// implements durablecounter.Store, and embedding it makes *Store one.
	inner
}

type inner = durablecounter.Store

var _ durablecounter.Store = (*Store)(nil)

// New validates cfg and returns a Store. It makes no call: use
// internal/ddb.CheckTable to check the table at start-up. Its errors wrap
// durablecounter.ErrConfig.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: dynamostore: Config.Client is required", durablecounter.ErrConfig)
	}
	if cfg.Table == "" {
		return nil, fmt.Errorf("%w: dynamostore: Config.Table is required", durablecounter.ErrConfig)
	}
	if cfg.ExpiryMargin < 0 {
		return nil, fmt.Errorf("%w: dynamostore: Config.ExpiryMargin %s is negative", durablecounter.ErrConfig, cfg.ExpiryMargin)
	}
	if cfg.Transactions > TransactionsOff {
		return nil, fmt.Errorf("%w: dynamostore: Config.Transactions %d is not a TransactionMode", durablecounter.ErrConfig, cfg.Transactions)
	}
	margin := cfg.ExpiryMargin
	if margin == 0 {
		margin = DefaultExpiryMargin
	}
	views := cfg.ViewCacheSize
	switch {
	case views == 0:
		views = DefaultViewCacheSize
	case views < 0:
		views = 0
	}
	c := &conn{client: cfg.Client, table: aws.String(cfg.Table)}
	backoff := cfg.RetryBackoff
	if backoff == 0 {
		backoff = DefaultRetryBackoff
	}
	if backoff > 0 {
		c.opts = []func(*dynamodb.Options){func(o *dynamodb.Options) {
			if o.Retryer != nil {
				o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, backoff)
			}
		}}
	}
	st := wire.NewStore(wire.Config{
		Conn:          c,
		Name:          cfg.Table,
		ExpiryMargin:  margin,
		Transactions:  txModes[cfg.Transactions],
		ViewCacheSize: views,
	}).(durablecounter.Store)
	return &Store{inner: st}, nil
}

var txModes = [...]wire.TxMode{TransactionsAuto: wire.TxAuto, TransactionsRequired: wire.TxRequired, TransactionsOff: wire.TxOff}
