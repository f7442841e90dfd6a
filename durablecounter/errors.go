package durablecounter

import "errors"

// Sentinel errors. Errors from this package wrap one of these (or the
// backend's error) with %w; test for them with errors.Is.
var (
	// ErrConfig is wrapped by every error of New, and of dynamostore.New,
	// for an invalid configuration.
	ErrConfig = errors.New("durablecounter: invalid config")
	// ErrUnsupportedAlgorithm is returned by New for an algorithm this
	// version does not implement.
	ErrUnsupportedAlgorithm = errors.New("durablecounter: algorithm not supported")
	// ErrNoKey is returned for a Request without a Key.
	ErrNoKey = errors.New("durablecounter: request has no key")
	// ErrStoreFull is returned by a Memory store that holds MaxKeys live
	// counts and cannot admit a new one. The engine treats it as a store
	// failure, so the policy's on_store_error decides; counts are never
	// evicted early (that would over-admit).
	ErrStoreFull = errors.New("durablecounter: memory store full")
	// ErrThrottled is wrapped, next to the SDK's error, when DynamoDB
	// throttled a call (ProvisionedThroughputExceeded, ThrottlingException,
	// RequestLimitExceeded).
	ErrThrottled = errors.New("durablecounter: throttled")
	// ErrBatch is returned by AllowBatch for members it cannot decide
	// together: not a *Counter, on another Store, or a policy twice.
	ErrBatch = errors.New("durablecounter: cannot batch")
	// ErrContention is returned when a decision's conditional updates kept
	// failing although the state each failure returned had room: other
	// instances changed the item between every attempt. It is a store
	// failure for the engine (on_store_error decides), never a denial.
	ErrContention = errors.New("durablecounter: item changed under every attempt")
	// ErrNoTransactions is returned by AllowBatch on a dynamostore.Store
	// with TransactionsRequired when the server lacks TransactWriteItems.
	ErrNoTransactions = errors.New("durablecounter: server does not support transactions")
	// ErrReceipt is returned by Refund for a decision whose Receipt this
	// Counter did not write (it names a shard the policy does not have).
	ErrReceipt = errors.New("durablecounter: receipt is not this policy's")
)
