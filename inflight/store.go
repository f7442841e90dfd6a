package inflight

import (
	"context"

	"github.com/edgelimit/edgelimit/inflight/internal/wire"
)

// Store keeps the slots of Limiters: a *Memory (in-process), or a
// *dynamostore.Store (package inflight/dynamostore, a DynamoDB table shared
// by every instance). Both have the same semantics: a holder is live from
// its take until it is released or its lease ends, holding the units it
// took (all of them, or none), and a take is denied only when the live
// holders hold more than the limit less its units. limitertest.RunInFlight holds
// every store to them, through a Limiter.
//
// Store is sealed, as every strategy's store is: its methods are the
// storage operations of the lease protocol, in this package's internal
// types, so only this module implements it. A program chooses a store; it
// does not write one. Exporting the operations would freeze a protocol
// that changes with the strategy, and invite stores that cannot keep the
// guarantees the suite checks (no more than the limit live, no spurious
// denial); a new backend is a package of this module, beside dynamostore,
// that runs the suite.
type Store interface {
	takeSlot(ctx context.Context, t wire.Take) (taken bool, st wire.State, err error)
	releaseSlot(ctx context.Context, item string, id wire.SlotID, units int64) (released bool, err error)
	slots(ctx context.Context, item string, now int64) (wire.State, error)
}

// remote is the Store of a backend package (inflight/dynamostore): its
// wire.Store behind the sealed methods.
type remote struct{ s wire.Store }

func (r remote) takeSlot(ctx context.Context, t wire.Take) (bool, wire.State, error) {
	return r.s.TakeSlot(ctx, t)
}

func (r remote) releaseSlot(ctx context.Context, item string, id wire.SlotID, units int64) (bool, error) {
	return r.s.ReleaseSlot(ctx, item, id, units)
}

func (r remote) slots(ctx context.Context, item string, now int64) (wire.State, error) {
	return r.s.Slots(ctx, item, now)
}

func init() {
	wire.NewStore = func(s wire.Store) any { return remote{s} }
}
