package kvbucket

import (
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// dynamoTable is a fresh table of a real server, for the internal tests
// that run a Bucket on DynamoDB. The internal tests cannot import
// kvbucket/dynamostore (it imports this package), so
// dynamostore_hook_test.go, in package kvbucket_test, sets newDynamoTable.
type dynamoTable struct {
	// KV returns a dynamostore.Store on the table whose clock (expires_at)
	// is now; with a region, that region's in a deployment over regions.
	KV func(now func() time.Time, region string, regions ...string) KV
	// Counter counts the SDK's calls on the table's client.
	Counter *ddbtest.Counter
}

var newDynamoTable func(t testing.TB, s ddbtest.Server) dynamoTable

// SetNewDynamoTable is how dynamostore_hook_test.go sets newDynamoTable.
func SetNewDynamoTable(f func(t testing.TB, s ddbtest.Server) (kv func(now func() time.Time, region string, regions ...string) KV, counter *ddbtest.Counter)) {
	newDynamoTable = func(t testing.TB, s ddbtest.Server) dynamoTable {
		kv, c := f(t, s)
		return dynamoTable{KV: kv, Counter: c}
	}
}

// dynamoKV returns the single-region store on a fresh table of s, with
// the table and its call counter.
func dynamoKV(t testing.TB, s ddbtest.Server, now func() time.Time) (KV, dynamoTable) {
	t.Helper()
	tab := newDynamoTable(t, s)
	return tab.KV(now, ""), tab
}
