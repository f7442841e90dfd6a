package durablecounter_test

import (
	"testing"

	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

func init() {
	durablecounter.SetNewDynamoPair(func(t *testing.T, s ddbtest.Server) (durablecounter.Store, durablecounter.Store) {
		t.Helper()
		client, table, _ := ddbtest.Table(t, s)
		tested, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		reader, err := dynamostore.New(dynamostore.Config{Client: client, Table: table, ViewCacheSize: -1})
		if err != nil {
			t.Fatal(err)
		}
		return tested, reader
	})
}
