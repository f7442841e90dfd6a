package durablecounter

import (
	"testing"

	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// newDynamoPair returns two stores on one fresh table of s: the store
// under test, and one without views to read the stored state with. The
// internal tests cannot import dynamostore (it imports this package), so
// dynamostore_hook_test.go, in package durablecounter_test, sets it.
var newDynamoPair func(t *testing.T, s ddbtest.Server) (tested, reader Store)

// SetNewDynamoPair is how dynamostore_hook_test.go sets newDynamoPair.
func SetNewDynamoPair(f func(t *testing.T, s ddbtest.Server) (tested, reader Store)) {
	newDynamoPair = f
}

// sharedStore is a store as a Counter sees one that other instances share
// (DynamoDB): the Memory inside answers, but the Counter keeps its deny
// cache in front of it, as it does for a dynamostore.Store and not for a
// Memory of its own.
type sharedStore struct{ Store }

// AsShared wraps s as sharedStore, for the tests of the deny cache.
func AsShared(s Store) Store { return sharedStore{s} }
