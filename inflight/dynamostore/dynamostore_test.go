package dynamostore_test

import (
	"testing"

	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/inflight/dynamostore"
	"github.com/edgelimit/edgelimit/inflight/storetest"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// newStore returns a Store on a fresh table of s.
func newStore(t *testing.T, s ddbtest.Server) (*dynamostore.Store, *ddbtest.Counter) {
	t.Helper()
	client, table, counter := ddbtest.Table(t, s)
	st, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return st, counter
}

// TestConformance runs the store suite against dynalite and moto, 64
// clients at once in its concurrency tests.
func TestConformance(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		storetest.Run(t, func(t *testing.T) inflight.Store {
			st, _ := newStore(t, s)
			return st
		}, storetest.Options{})
	})
}

// TestEngine runs in-flight policies through the engine and the net/http
// middleware on dynalite and moto.
func TestEngine(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		storetest.RunEngine(t, func(t *testing.T) inflight.Store {
			st, _ := newStore(t, s)
			return st
		})
	})
}

func newBenchStore(client dynamostore.API, table string) (*dynamostore.Store, error) {
	return dynamostore.New(dynamostore.Config{Client: client, Table: table})
}
