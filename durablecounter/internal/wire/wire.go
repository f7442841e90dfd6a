// Package wire is the language between durablecounter's conditional-write
// protocol and a table client, without any SDK type: what the algorithms
// send (a conditional update in DynamoDB's expression syntax: expression
// strings, attribute names, int64 values) and what comes back (items read
// through an accessor, and typed failures).
//
// durablecounter decides (each algorithm's encoding builds the updates and
// decodes the items; its DynamoDB store retries, batches and falls back); a
// Conn only converts and sends. durablecounter/dynamostore implements Conn on the AWS
// SDK, so that programs that never talk to DynamoDB link no SDK. The package
// is internal: its types are durablecounter's storage protocol, which
// changes as algorithms are added.
package wire

import (
	"context"
	"iter"
	"time"
)

// Return says what a successful update returns.
type Return uint8

const (
	// ReturnNone: nothing (a refund).
	ReturnNone Return = iota
	// ReturnUpdatedNew: the attributes the update wrote, as they are after it.
	ReturnUpdatedNew
	// ReturnAllNew: the whole item after the update.
	ReturnAllNew
)

// Update is one conditional update of one item, or one member of a
// transaction. Values are all numbers.
type Update struct {
	// Expr is the update expression, Cond its condition ("": none, an
	// update that always applies; never in a transaction).
	Expr, Cond string
	// Names maps placeholders (#x) to attribute names; Values
	// placeholders (:x) to numbers.
	Names  []Name
	Values []Value
	// Return is what a successful update returns (a transaction returns
	// nothing).
	Return Return
	// SkipOldRead: should the server return no old item with a failed
	// condition, do not read it: the failure alone proves what the protocol
	// needs (see ConditionFailed).
	SkipOldRead bool
}

// Name is one attribute-name placeholder.
type Name struct{ Placeholder, Attr string }

// Value is one number placeholder.
type Value struct {
	Placeholder string
	N           int64
}

// Name sets placeholder to attr.
func (u *Update) Name(placeholder, attr string) {
	for i := range u.Names {
		if u.Names[i].Placeholder == placeholder {
			u.Names[i].Attr = attr
			return
		}
	}
	u.Names = append(u.Names, Name{placeholder, attr})
}

// Value sets placeholder to v.
func (u *Update) Value(placeholder string, v int64) {
	for i := range u.Values {
		if u.Values[i].Placeholder == placeholder {
			u.Values[i].N = v
			return
		}
	}
	u.Values = append(u.Values, Value{placeholder, v})
}

// Item is a stored item, or the part of it an update returned. A nil Item
// and an empty one are both an absent item.
type Item interface {
	// Len is the number of attributes.
	Len() int
	// Int reads a number attribute; ok is false when it is absent, err
	// non-nil when it is not a number that fits an int64.
	Int(attr string) (n int64, ok bool, err error)
	// Attrs yields the attribute names, in no particular order.
	Attrs() iter.Seq[string]
}

// ConditionFailed is the error of an update whose condition failed.
type ConditionFailed struct {
	// Old is the item the condition failed on. Servers return it
	// (ReturnValuesOnConditionCheckFailure=ALL_OLD); where one ignores
	// that (dynalite), the Conn reads the item right after, consistently,
	// unless the update has SkipOldRead (an absent item is then an empty
	// Item). Nil with ReadErr set when that read failed, nil without it
	// after SkipOldRead.
	Old     Item
	ReadErr error
	// Err is the server's error.
	Err error
}

func (e *ConditionFailed) Error() string { return e.Err.Error() }
func (e *ConditionFailed) Unwrap() error { return e.Err }

// Code is how a cancelled transaction judged one member.
type Code uint8

const (
	// CodeNone: the member's condition held.
	CodeNone Code = iota
	// CodeConditionFailed: its condition failed; Reason.Old is the item.
	CodeConditionFailed
	// CodeConflict: not evaluated, another transaction held the item.
	CodeConflict
	// CodeThrottled: the member was throttled.
	CodeThrottled
	// CodeOther: any other reason (Reason.Name says which).
	CodeOther
)

// Reason is one member's part of a cancellation.
type Reason struct {
	Code Code
	// Name is the server's code, for errors.
	Name string
	// Old and ReadErr are as in ConditionFailed, for CodeConditionFailed.
	Old     Item
	ReadErr error
}

// Canceled is the error of a transaction that was cancelled.
type Canceled struct {
	// Reasons has one entry per member, in order.
	Reasons []Reason
	// Err is the server's error.
	Err error
}

func (e *Canceled) Error() string { return e.Err.Error() }
func (e *Canceled) Unwrap() error { return e.Err }

// MaxBatchGet is the most items one BatchGet reads.
const MaxBatchGet = 100

// Conn is a table as the protocol uses it. Every read is strongly
// consistent. Errors other than *ConditionFailed and *Canceled are the
// server's or the transport's, and the predicates classify them.
type Conn interface {
	// Update applies u to the item pk and returns what u.Return asks for.
	// A failed condition is a *ConditionFailed.
	Update(ctx context.Context, pk string, u *Update) (Item, error)
	// Get reads the item pk (nil if absent).
	Get(ctx context.Context, pk string) (Item, error)
	// Delete removes the item pk; removing an absent item is not an error.
	Delete(ctx context.Context, pk string) error
	// BatchGet reads the items pks (at most MaxBatchGet), calling found
	// for each one that exists, and returns the keys the server left
	// unprocessed.
	BatchGet(ctx context.Context, pks []string, found func(pk string, it Item)) (unprocessed []string, err error)
	// Transact applies us[i] to the item pks[i], all or nothing. A
	// cancellation is a *Canceled.
	Transact(ctx context.Context, pks []string, us []Update) error
	// Throttled reports an error that says the server throttled the call.
	Throttled(err error) bool
	// Unsupported reports an error that says the server does not implement
	// the operation (dynalite's TransactWriteItems).
	Unsupported(err error) bool
}

// TxMode says how batches commit; see dynamostore.TransactionMode.
type TxMode uint8

// The modes, as dynamostore's TransactionMode.
const (
	TxAuto TxMode = iota
	TxRequired
	TxOff
)

// Config configures durablecounter's store on a Conn.
type Config struct {
	Conn Conn
	// Name names the store in its batch key.
	Name string
	// ExpiryMargin is added to every expires_at.
	ExpiryMargin time.Duration
	// Transactions is how batches commit.
	Transactions TxMode
	// ViewCacheSize bounds the views; 0 keeps none.
	ViewCacheSize int
}

// NewStore returns durablecounter's store on cfg.Conn: a
// durablecounter.Store, for dynamostore to embed. durablecounter sets it
// when it initialises (it cannot be a function of this package: the store
// is made of durablecounter's unexported types, which is what keeps Store
// sealed).
var NewStore func(cfg Config) any
