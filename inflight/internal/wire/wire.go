// Package wire is the language between inflight's Limiter and a store of
// slots outside package inflight (inflight/dynamostore's table): a take, a
// release and a read of one item, with the semantics every store of the
// strategy keeps. It is internal: it is inflight's storage protocol, which
// changes with the strategy, and inflight.Store is sealed over it (see
// there for why).
package wire

import (
	"context"
	"encoding/base64"
)

// SlotID names one holder of a slot: 16 random bytes, drawn by the Limiter
// for each admitted request and carried in its Decision's Receipt.ID, so
// that a release removes exactly that holder and nothing else.
type SlotID [16]byte

// String returns the id as 22 characters of unpadded base64url, as the
// DynamoDB item names its holder.
func (id SlotID) String() string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// IsZero reports whether id is the zero id, which no Limiter draws: a
// Decision whose Receipt.ID is zero took no slot.
func (id SlotID) IsZero() bool { return id == SlotID{} }

// Take asks a Store for Units slots of an item, all or none: one holder
// that holds them together and gives them back together.
type Take struct {
	// Item is the item's name: "if#<policy>#<keyhash>".
	Item string
	// ID is the new holder.
	ID SlotID
	// Units is how many slots the new holder takes (the request's cost, or
	// what the application reserved for it); 0 means 1.
	Units int64
	// Limit is how many slots the item's live holders may hold together,
	// the new one's included.
	Limit int64
	// Now is the instant of the decision, Unix nanoseconds: a holder whose
	// lease expiry is at or before Now is no longer live, and the take may
	// reclaim its slot.
	Now int64
	// Expiry is the new holder's lease expiry, Unix nanoseconds (Now plus
	// the lease).
	Expiry int64
}

// State is what a Store reports of an item at an instant.
type State struct {
	// Live is the number of slots the live holders hold: after the take
	// when one was taken, else at the instant that decided the denial.
	Live int64
	// Earliest is the earliest lease expiry of the live holders, Unix
	// nanoseconds; 0 when there are none. By then at least one holder's
	// slots are free again, whether or not it releases them.
	Earliest int64
}

// Store keeps the holders of every key's slots. The memory store of
// package inflight and inflight/dynamostore's table both keep the
// semantics below; limitertest.RunInFlight holds them to it through the
// Limiter.
//
// A holder is live from its take until it is released or its lease
// expires, whichever comes first, and holds its Units slots all that time.
// At any instant the live holders of an item hold together at most the
// Limit of the take that added the newest of them.
type Store interface {
	// TakeSlot adds t.ID as a holder of t.Units slots of t.Item if, at
	// t.Now, the live holders hold at most t.Limit - t.Units; holders whose
	// lease has expired are reclaimed (removed) as needed. The take is one
	// write: all the units or none. It reports whether they were taken and
	// the item's state. A denial is real: at some instant during the call,
	// the live holders held more than t.Limit - t.Units. An error means the
	// store failed; the holder may then have been added (a write whose
	// answer was lost), and its lease bounds how long it can hold them.
	TakeSlot(ctx context.Context, t Take) (taken bool, st State, err error)
	// ReleaseSlot removes holder id of item, which took units slots, if it
	// is there. It reports whether it was (false: released already,
	// reclaimed after its lease, or it holds another number of units);
	// releasing twice changes nothing. An error means the release did not
	// land: the slots stay held until the lease expires.
	ReleaseSlot(ctx context.Context, item string, id SlotID, units int64) (released bool, err error)
	// Slots returns the item's state at now (Unix nanoseconds), read
	// consistently, without changing it.
	Slots(ctx context.Context, item string, now int64) (State, error)
}

// NewStore returns s as an inflight.Store, for a backend's package to
// embed. Package inflight sets it when it initialises (it cannot be a
// function of this package: inflight.Store's methods are inflight's
// unexported ones, which is what keeps it sealed).
var NewStore func(s Store) any

// UnitsOf returns n slots, 0 (or less) meaning 1.
func UnitsOf(n int64) int64 { return max(n, 1) }
