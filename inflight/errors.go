package inflight

import "errors"

// Sentinel errors. Errors from this package and its stores wrap one of
// these (or the backend's error) with %w; test for them with errors.Is.
var (
	// ErrConfig is wrapped by every error of New and of a store's
	// constructor for an invalid configuration.
	ErrConfig = errors.New("inflight: invalid config")
	// ErrNoKey is returned for a Request without a Key.
	ErrNoKey = errors.New("inflight: request has no key")
	// ErrCost is returned by New for a policy whose cost is more than its
	// limit: no request could ever hold its slots (the policy file refuses
	// it too). A Request of more units than the limit in force (an
	// override's, or the application's reservation) is denied, not an
	// error.
	ErrCost = errors.New("inflight: cost more than the limit")
	// ErrStoreFull is returned by a Memory store that holds MaxKeys keys
	// with live holders and cannot admit a new key. The engine treats it as
	// a store failure (on_store_error decides); a live slot is never
	// forgotten early, which would admit one request too many.
	ErrStoreFull = errors.New("inflight: memory store full")
	// ErrThrottled is wrapped, next to the SDK's error, when DynamoDB
	// throttled a call.
	ErrThrottled = errors.New("inflight: throttled")
	// ErrContention is returned when a take's conditional writes kept
	// failing although each read showed a free or reclaimable slot: other
	// instances changed the item between every attempt. It is a store
	// failure for the engine, never a denial.
	ErrContention = errors.New("inflight: item changed under every attempt")
)
