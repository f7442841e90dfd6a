// Package wire is the language between kvbucket's buckets and a KV
// outside package kvbucket (kvbucket/dynamostore's table): a bucket's state
// as regions' parts of a theoretical arrival time (Part, Tally, in Wide
// bucket units), and the one atomic, commutative change a KV applies to it
// (Update). It is internal: it is kvbucket's storage protocol, which
// changes with the strategy, and kvbucket.KV is sealed over it (see there
// for why).
package wire

import (
	"context"
	"time"
)

// KV stores the shared state of buckets. Its writes commute: a bucket's
// state is a theoretical arrival time (TAT) that spending raises by adding
// to it, so that concurrent instances' spending adds up in the store instead
// of the last writer's copy replacing the others'. A KV needs no
// transactions: one atomic update of one item, which is DynamoDB's
// UpdateItem (ADD, or a SET under a condition), and reads that may be stale.
//
// A deployment spread over regions (a DynamoDB Global Table, whose
// replication keeps the last writer's copy of each item) gives each region
// its own part of the state, written only there, and sums the parts on read
// (see Tally): each region's spending stays in its own item, so replication
// never has two writers of one item to choose between.
//
// Implementations are safe for concurrent use, pass ctx to their backend
// (the engine sets the time budget there), and return errors that name the
// key; they never panic on what they read. kvbucket's TestKVUpdateSemantics
// holds every implementation (the memory KV, dynamostore's on dynalite and
// moto) to the semantics of Update.
type KV interface {
	// Get returns key's state: this region's part and the others'. A key
	// with no state returns parts without a TAT (a full bucket). c says how
	// fresh the read must be.
	Get(ctx context.Context, key string, c Consistency) (Tally, error)
	// Update applies u to this region's part of key atomically and returns
	// the state after it (this region's part as the update left it, the
	// others' as last replicated here). A conditional update whose condition
	// fails changes nothing and returns Applied false, with the state that
	// failed it.
	Update(ctx context.Context, key string, u Update) (Tally, error)
}

// Part is one region's part of a bucket's state. Its pointer comes first
// (kvbucket's cache entry keeps its pointers together, see entry).
type Part struct {
	// Writers are the instances that wrote the part in the current and the
	// previous epoch: how the bucket counts the instances sharing a key.
	Writers []Writer
	// Has reports whether the part holds a TAT. A region that never wrote
	// the key (or whose state is gone) holds none: as far as it is concerned
	// the bucket is full.
	Has bool
	// TAT is the region's partial theoretical arrival time, in bucket units
	// (nanoseconds × Limit; one token is Window units). It is raised to a
	// floor (never lowered, but by a refund or a clock repair) and added to.
	TAT Wide
	// Spent is the tokens this region spent, less refunds and undone
	// reservations: only ever added to.
	Spent int64
	// GrantLeft are the tokens an operator's grant (kvbucket's Bucket.Grant) still
	// gives the key beyond its bucket, until GrantUntil (Unix
	// nanoseconds; 0: no grant). A grant lives in the part of the region
	// that made it and is spent only there, each token by a conditional
	// update, so that no two instances spend one token.
	GrantLeft, GrantUntil int64
	// Version orders the states of the part: it starts at the creating
	// writer's clock (Unix nanoseconds) and every update adds one, so of
	// two answers about a part, the one with the higher version is the
	// later state, even across a part that expired and was created anew
	// (answers of concurrent calls come back in any order).
	Version int64
}

// Writer is an instance registered by its write in an epoch (the sync
// interval's multiple since the Unix epoch).
type Writer struct {
	Epoch int64
	ID    uint32
}

// Tally is a bucket's state as a KV returns it.
type Tally struct {
	// Own is this region's part, the only one this region writes.
	Own Part
	// Others are the other regions' parts, as replicated here (possibly
	// seconds old); empty in a single region.
	Others []Part
	// Applied reports whether an Update was applied. A Get leaves it false.
	Applied bool
}

// Update is one atomic change of this region's part of a bucket:
//
//	if HasCap and TAT > Cap:      TAT = Cap                (a clock far ahead)
//	if Conditional and not fits:  change nothing, Applied = false
//	if HasFloor and TAT < Floor:  TAT = Floor + Add        (a raise: the bucket had refilled)
//	else:                         TAT = TAT + Add
//	Spent += Spent;  Version += 1 (from now if new);  Writers += {Writer in Epoch};  drop writer sets before Epoch−1
//	if Grant > 0:  GrantLeft = Grant, GrantUntil = GrantUntil           when GrantUntil ≤ GrantAt (none in force)
//	               GrantLeft += Grant, GrantUntil = max(both)            otherwise
//	if GrantSpend > 0:  GrantLeft −= GrantSpend, only if GrantUntil > GrantAt and GrantLeft ≥ GrantSpend
//	keep the part until TTL has passed
//
// where a missing TAT is below every floor and fits means: (TAT is missing
// or below Floor, or TAT ≤ MaxTAT) and (not HasMaxSpent or Spent ≤ MaxSpent).
// Raising to a floor and adding commute with other instances' additions, so
// no update is lost; the condition makes a reservation that only lands when
// it fits.
type Update struct {
	// Add is added to the TAT (negative for refunds and undone reservations).
	Add Wide
	// Spent is added to Part.Spent.
	Spent int64
	// Floor, with HasFloor, is what the TAT is raised to before Add when it
	// is lower.
	Floor    Wide
	HasFloor bool
	// RaiseFirst hints that the caller expects the TAT below Floor (it saw
	// the bucket full): a KV that must choose between a raise and an add
	// (DynamoDB: which UpdateItem to send first) tries the raise first.
	RaiseFirst bool
	// Cap, with HasCap, lowers a TAT above it to it first: the repair of a
	// state written by a clock far ahead (see MaxClockSkew).
	Cap    Wide
	HasCap bool
	// Conditional makes the update apply only if it fits (see above).
	Conditional bool
	MaxTAT      Wide
	MaxSpent    int64
	HasMaxSpent bool
	// Writer is registered as having written in Epoch.
	Writer uint32
	Epoch  int64
	// Stale are epochs whose writer sets the caller saw and are now older
	// than Epoch−1: the KV drops them (it drops Epoch−2 in any case).
	Stale []int64
	// Grant adds an operator's grant of that many tokens lasting until
	// GrantUntil (Unix nanoseconds), as of the instant GrantAt (see above).
	Grant, GrantUntil, GrantAt int64
	// GrantSpend spends that many tokens of the grant in force at GrantAt;
	// the update applies only if the grant holds them (see Fits).
	GrantSpend int64
	// TTL is how long the part must be kept at least: after it the bucket
	// is full again whatever the other instances spent meanwhile, and a
	// missing part reads as full.
	TTL time.Duration
}

// Fits reports whether u applies to p: always for an unconditional update
// but a spend of a grant (which needs the grant to hold it); for a
// conditional one, whether it fits (see Update). A KV decides with
// it which state failed a condition.
func (u *Update) Fits(p Part) bool {
	if u.GrantSpend > 0 && (p.GrantUntil <= u.GrantAt || p.GrantLeft < u.GrantSpend) {
		return false
	}
	if !u.Conditional {
		return true
	}
	if u.HasMaxSpent && p.Spent > u.MaxSpent {
		return false
	}
	if !p.Has || u.HasFloor && p.TAT.Less(u.Floor) {
		return true
	}
	return p.TAT.Cmp(u.MaxTAT) <= 0
}

// Consistency is a read's freshness hint.
type Consistency uint8

const (
	// Eventual accepts a state that may miss writes of about the last
	// second (on DynamoDB: an eventually consistent read, half the cost of a
	// strong one, served by the nearest replica).
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

// NewKV returns kv as a kvbucket.KV, for a backend's package to embed.
// Package kvbucket sets it when it initialises (it cannot be a function of
// this package: kvbucket.KV's methods are kvbucket's unexported ones,
// which is what keeps it sealed).
var NewKV func(kv KV) any
