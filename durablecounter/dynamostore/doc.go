// Package dynamostore is durablecounter's Store on a DynamoDB table, shared
// by every instance that uses the table: exact counts with one conditional
// UpdateItem per decision (see the durablecounter documentation for the
// data model, the one-write protocol, batches and the servers' quirks).
//
//	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: "edgelimit"})
//	counter, err := durablecounter.New(durablecounter.Config{Policy: p, Store: store})
//
// It is a package of its own so that the AWS SDK is linked only by the
// programs that import it: durablecounter, its Memory store, middleware,
// pow and signedwindow link none of it.
//
// # Why the algorithms speak no SDK
//
// Every decision is the algorithm's: which conditional update to send,
// what a failed condition proves, when a transaction is retried and when
// it is denied, how a refund is guarded. That logic stays in
// durablecounter, next to the algorithms and the deny cache, written
// against a small SDK-free language (durablecounter/internal/wire): an
// update is its expression strings, its attribute names and its int64
// values; an item comes back through an accessor (Int, Attrs); a failed
// condition and a cancelled transaction are typed errors carrying the old
// items. This package only converts that language to the SDK's types and
// back, in one file (conn.go), and classifies the server's errors.
//
// The other way round (the protocol here, on SDK types, with the
// algorithms' internals exported to it) would have frozen the algorithms'
// state and their updates as API, and split every algorithm's logic across
// two packages. A conversion costs two small maps per call (names and
// values), next to a network round trip.
//
// # Sealed
//
// durablecounter.Store stays sealed: its operations are in durablecounter's
// unexported types and change as algorithms are added. A *Store is one
// because it embeds the store durablecounter builds on this package's
// connection (through wire.NewStore, set when durablecounter initialises).
//
// # Server quirks
//
// dynalite ignores ReturnValuesOnConditionCheckFailure: this package reads
// the item right after a failed condition (one consistent GetItem, or one
// BatchGetItem for the members of a cancelled transaction), in one place
// (conn.readOld), unless the failure alone proves the denial (a fixed
// window of cost 1). dynalite lacks TransactWriteItems: durablecounter's
// batch code switches to the sequential fallback the first time the server
// says so (TransactionsAuto), in one place.
package dynamostore
