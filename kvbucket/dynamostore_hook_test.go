package kvbucket_test

import (
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/kvbucket/dynamostore"
)

func init() {
	kvbucket.SetNewDynamoTable(func(t testing.TB, s ddbtest.Server) (func(now func() time.Time, region string, regions ...string) kvbucket.KV, *ddbtest.Counter) {
		t.Helper()
		client, table, counter := ddbtest.Table(t, s)
		return func(now func() time.Time, region string, regions ...string) kvbucket.KV {
			st, err := dynamostore.New(dynamostore.Config{Client: client, Table: table, Now: now, Region: region, Regions: regions})
			if err != nil {
				t.Fatalf("dynamostore.New: %v", err)
			}
			return st
		}, counter
	})
}
