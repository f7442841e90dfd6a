package kvbucket

import (
	"context"
	"time"
)

// KV stores bucket states under string keys. It needs no transactions and
// no conditional writes: reads may be stale and the last write wins, which
// is what makes a DynamoDB Global Table replica near the function usable.
// Implementations are safe for concurrent use, pass ctx to their backend
// (the engine sets the time budget there), and return errors that name the
// key; they never panic on what they read.
type KV interface {
	// Get returns the state stored under key. found is false when there is
	// none or it has expired. c says how fresh the read must be.
	Get(ctx context.Context, key string, c Consistency) (s State, found bool, err error)
	// Put stores s under key, replacing whatever is there (last writer
	// wins). The state may be dropped once ttl has passed: by then the
	// bucket would be full anyway, and a missing state reads as full.
	Put(ctx context.Context, key string, s State, ttl time.Duration) error
}

// Consistency is a read's freshness hint.
type Consistency uint8

const (
	// Eventual accepts a state that may miss writes of about the last
	// second (on DynamoDB: an eventually consistent GetItem, half the read
	// cost of a strong one, served by the nearest replica). The bucket reads
	// this way: its merge is built for staleness.
	Eventual Consistency = iota
	// Strong asks for a state that reflects every write acknowledged before
	// the read started (on DynamoDB, within the replica's region).
	Strong
)

// String returns "eventual" or "strong".
func (c Consistency) String() string {
	if c == Strong {
		return "strong"
	}
	return "eventual"
}
