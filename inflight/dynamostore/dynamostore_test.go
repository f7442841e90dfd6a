package dynamostore_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/inflight/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// newStore returns a Store on a fresh table of s. The conformance suite
// runs on it from package inflight's tests (TestConformanceDynamo,
// TestEngineDynamo).
func newStore(t *testing.T, s ddbtest.Server) (*dynamostore.Store, *ddbtest.Counter) {
	t.Helper()
	client, table, counter := ddbtest.Table(t, s)
	st, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return st, counter
}

// testCtx is a context with a generous deadline for the tests' calls: a
// release without one has inflight.ReleaseTimeout (1 s), which moto under
// make test's load once exceeded (slow, never wrong).
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newBenchStore(client dynamostore.API, table string) (*dynamostore.Store, error) {
	return dynamostore.New(dynamostore.Config{Client: client, Table: table})
}
