package kvbucket

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them (or the
// KV's own error) with context; test with errors.Is.
var (
	// ErrBadConfig is wrapped by every error of New, NewDynamoDB and
	// Params.Validate.
	ErrBadConfig = errors.New("kvbucket: bad config")
	// ErrBadKey reports a request key that is empty or longer than MaxKeyLength.
	ErrBadKey = errors.New("kvbucket: bad key")
	// ErrBadItem reports a stored item that is not a bucket state (missing
	// or malformed attributes).
	ErrBadItem = errors.New("kvbucket: malformed item")
	// ErrBadReceipt reports a Refund of a Decision this Bucket did not
	// spend for that key (another Bucket's, another key's, or a Peek's).
	ErrBadReceipt = errors.New("kvbucket: bad receipt")
	// ErrThrottled is wrapped, next to the SDK's error, when DynamoDB
	// throttled the call.
	ErrThrottled = errors.New("kvbucket: throttled")
)
