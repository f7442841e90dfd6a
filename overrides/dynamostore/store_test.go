package dynamostore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/overrides"
	"github.com/edgelimit/edgelimit/overrides/dynamostore"
	"github.com/edgelimit/edgelimit/policy"
)

// The DynamoDB store and the memory store answer the same sequence the
// same way, on every server.
func TestStoreAgainstMemory(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		client, table, calls := ddbtest.Table(t, srv)
		now := time.Unix(1_700_000_000, 0)
		clock := func() time.Time { return now }
		db, err := dynamostore.New(dynamostore.Config{Client: client, Table: table, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		mem := overrides.NewMemory(clock)
		ctx := context.Background()
		check := func(step, pol, key string, want policy.Limits, wantOK bool) {
			t.Helper()
			for name, s := range map[string]edgelimit.OverrideStore{"dynamodb": db, "memory": mem} {
				l, ok, err := s.Override(ctx, pol, key)
				if err != nil || ok != wantOK || l != want {
					t.Errorf("%s: %s: Override = %+v, %v, %v; want %+v, %v", step, name, l, ok, err, want, wantOK)
				}
			}
		}
		both := func(f func(edgelimit.OverrideStore) error) {
			t.Helper()
			for _, s := range []edgelimit.OverrideStore{db, mem} {
				if err := f(s); err != nil {
					t.Fatal(err)
				}
			}
		}
		check("empty", "paid", "k1", policy.Limits{}, false)
		full := policy.Limits{Limit: 5000, Window: 24 * time.Hour, Burst: 50}
		both(func(s edgelimit.OverrideStore) error { return s.SetOverride(ctx, "paid", "k1", full, time.Time{}) })
		check("set", "paid", "k1", full, true)
		check("other policy", "free", "k1", policy.Limits{}, false)
		calls.Reset()
		if _, _, err := db.Override(ctx, "paid", "k1"); err != nil || calls.Total() != 1 || calls.Op("GetItem") != 1 {
			t.Errorf("a read cost %v calls, want one GetItem", calls.Snapshot())
		}
		until := now.Add(90 * time.Second)
		both(func(s edgelimit.OverrideStore) error {
			return s.SetOverride(ctx, "paid", "k1", policy.Limits{Limit: 7}, until)
		})
		check("limit only", "paid", "k1", policy.Limits{Limit: 7}, true)
		now = until.Add(-time.Millisecond)
		check("just before its end", "paid", "k1", policy.Limits{Limit: 7}, true)
		now = until
		check("at its end", "paid", "k1", policy.Limits{}, false)
		both(func(s edgelimit.OverrideStore) error { return s.DeleteOverride(ctx, "paid", "k1") })
		both(func(s edgelimit.OverrideStore) error { return s.DeleteOverride(ctx, "paid", "never-set") })
		check("deleted", "paid", "k1", policy.Limits{}, false)

		// A block (edgelimit override set --limit 0) is stored as limit 0
		// and read back as a block, with its window.
		block := policy.Limits{Block: true, Window: time.Minute}
		both(func(s edgelimit.OverrideStore) error { return s.SetOverride(ctx, "paid", "k3", block, time.Time{}) })
		check("blocked", "paid", "k3", block, true)
		both(func(s edgelimit.OverrideStore) error {
			return s.SetOverride(ctx, "paid", "k3", policy.Limits{Block: true}, time.Time{})
		})
		check("blocked, no window", "paid", "k3", policy.Limits{Block: true}, true)

		// The item's TTL attribute is the end in seconds, rounded up.
		if err := db.SetOverride(ctx, "paid", "k2", policy.Limits{Limit: 1}, time.UnixMilli(1_700_000_000_500)); err != nil {
			t.Fatal(err)
		}
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "ovr#paid#k2"}}})
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := out.Item["expires_at"].(*types.AttributeValueMemberN); v == nil || v.Value != "1700000001" {
			t.Errorf("expires_at = %v, want 1700000001", out.Item["expires_at"])
		}

		// A corrupt item is an error, which the engine treats as a failed
		// read (the policy's on_store_error decides) and logs.
		if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "ovr#paid#bad"}, "limit": &types.AttributeValueMemberN{Value: "-3"}}}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.Override(ctx, "paid", "bad"); err == nil {
			t.Error("a negative limit was read as an override")
		}
	})
}

func TestNewRefusesBadConfig(t *testing.T) {
	if _, err := dynamostore.New(dynamostore.Config{Table: "t"}); !errors.Is(err, dynamostore.ErrConfig) {
		t.Errorf("no client: %v", err)
	}
	if _, err := dynamostore.New(dynamostore.Config{Client: &dynamodb.Client{}}); !errors.Is(err, dynamostore.ErrConfig) {
		t.Errorf("no table: %v", err)
	}
}
