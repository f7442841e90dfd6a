package kvbucket

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them (or the
// KV's own error) with context; test with errors.Is.
var (
	// ErrConfig is wrapped by every error of New, Params.Validate and
	// dynamostore.New, for an invalid configuration (durablecounter's
	// sentinel of the same name means the same).
	ErrConfig = errors.New("kvbucket: invalid config")
	// ErrBadKey reports a request key that is empty or longer than MaxKeyLength.
	ErrBadKey = errors.New("kvbucket: bad key")
	// ErrBadItem reports a stored item that is not a bucket state (missing
	// or malformed attributes); a KV wraps it.
	ErrBadItem = errors.New("kvbucket: malformed item")
	// ErrReceipt reports a Refund of a Decision this Bucket did not spend
	// for that key (another Bucket's, another key's, or a Peek's).
	ErrReceipt = errors.New("kvbucket: receipt is not this bucket's")
	// ErrThrottled is wrapped, next to the SDK's error, when the KV's
	// backend throttled the call (dynamostore: DynamoDB's throttling
	// errors, or keys left unprocessed).
	ErrThrottled = errors.New("kvbucket: throttled")
)

// ErrGrant reports a grant Bucket.Grant refuses: no units, more than
// MaxTokens, an end that has passed, or limits in force of 0.
var ErrGrant = errors.New("kvbucket: bad grant")
