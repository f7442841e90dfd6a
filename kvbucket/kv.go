package kvbucket

import (
	"context"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"
)

// KV keeps the shared state of Buckets: a *Memory (in-process, one region)
// or a *dynamostore.Store (package kvbucket/dynamostore, a DynamoDB table
// shared by every instance, over regions if need be). Its writes commute:
// a bucket's state is a theoretical arrival time that spending raises by
// adding to it, so that concurrent instances' spending adds up in the
// store instead of the last writer's copy replacing the others' (see the
// package documentation). Both stores have the same update semantics,
// which TestKVUpdateSemantics checks on memory, dynalite and moto, and
// both run the conformance suite (limitertest.Run) under Buckets.
//
// KV is sealed, as every strategy's store is: its methods are the
// storage operations of the bucket protocol, in this package's internal
// types, so only this module implements it. A program chooses a KV; it
// does not write one. Exporting the operations (as it once did, with six
// wire types that only dynamostore used) would freeze a protocol that
// changes with the strategy, and invite KVs that cannot keep the update
// semantics the over-admission bound rests on; a new backend is a package
// of this module, beside dynamostore, that runs the tests. Bucket.Stats
// counts a Bucket's KV calls.
type KV interface {
	get(ctx context.Context, key string, c wire.Consistency) (wire.Tally, error)
	update(ctx context.Context, key string, u wire.Update) (wire.Tally, error)
}

// remote is the KV of a backend package (kvbucket/dynamostore): its
// wire.KV behind the sealed methods.
type remote struct{ kv wire.KV }

func (r remote) get(ctx context.Context, key string, c wire.Consistency) (wire.Tally, error) {
	return r.kv.Get(ctx, key, c)
}

func (r remote) update(ctx context.Context, key string, u wire.Update) (wire.Tally, error) {
	return r.kv.Update(ctx, key, u)
}

func init() {
	wire.NewKV = func(kv wire.KV) any { return remote{kv} }
}
