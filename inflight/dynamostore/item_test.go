package dynamostore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/inflight/dynamostore"
	"github.com/edgelimit/edgelimit/inflight/internal/wire"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

func rawItem(t *testing.T, c *dynamodb.Client, table, pk string) map[string]string {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for k, v := range out.Item {
		switch v := v.(type) {
		case *types.AttributeValueMemberN:
			m[k] = v.Value
		case *types.AttributeValueMemberS:
			m[k] = v.Value
		}
	}
	return m
}

// TestItem pins the stored item: its key, its holder count, one attribute
// per holder with its lease's end, and expires_at a margin after the
// latest lease, so that TTL removes an idle key and never a live holder.
func TestItem(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		client, table, _ := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		clock := limitertest.NewClock(t0)
		lim := crashLimiter(t, store, clock.Now)
		ctx := testCtx(t)
		key := "Zm9vYmFyYmF6cXV4cXV1eA" // a hashed key, as the engine gives it
		r := edgelimit.Request{Key: key}
		d, err := lim.Allow(ctx, r)
		if err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		pk := "if#speech#" + key
		item := rawItem(t, client, table, pk)
		id := wire.SlotID(d.Receipt.ID)
		want := map[string]string{
			"pk":               pk,
			"n":                "1",
			"h_" + id.String(): strconv.FormatInt(t0.Add(crashLease).UnixNano(), 10),
			"expires_at":       strconv.FormatInt(t0.Add(crashLease+dynamostore.DefaultExpiryMargin).Unix(), 10),
		}
		if len(item) != len(want) {
			t.Errorf("item = %v, want %v", item, want)
		}
		for k, v := range want {
			if item[k] != v {
				t.Errorf("item[%s] = %q, want %q (item %v)", k, item[k], v, item)
			}
		}
		if err := lim.Finish(ctx, r, d, 200, 0); err != nil {
			t.Fatal(err)
		}
		item = rawItem(t, client, table, pk)
		for k := range item {
			if strings.HasPrefix(k, "h_") {
				t.Errorf("after the release the item still has holder %s", k)
			}
		}
		if item["n"] != "0" {
			t.Errorf("after the release n = %q, want 0", item["n"])
		}
	})
}

// TestDriftRepaired: an item whose count says more holders than it has
// (edited by hand, say) does not deny forever: the take that finds a free
// slot among the holders rewrites the count.
func TestDriftRepaired(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		client, table, _ := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		clock := limitertest.NewClock(t0)
		lim, err := inflight.New(inflight.Config{
			Policy: &policy.Policy{Name: "speech", Limit: 2, Window: time.Minute}, Store: store, Now: clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		live := strconv.FormatInt(t0.Add(time.Minute).UnixNano(), 10)
		_, err = client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk":  &types.AttributeValueMemberS{Value: "if#speech#k"},
			"n":   &types.AttributeValueMemberN{Value: "7"},
			"h_x": &types.AttributeValueMemberN{Value: live},
		}})
		if err != nil {
			t.Fatal(err)
		}
		r := edgelimit.Request{Key: "k"}
		if d, err := lim.Allow(context.Background(), r); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("one holder of two: %+v, %v; want allowed, 0 left", d, err)
		}
		if n := rawItem(t, client, table, "if#speech#k")["n"]; n != "2" {
			t.Errorf("n = %s after the repair, want 2", n)
		}
		if d, err := lim.Allow(context.Background(), r); err != nil || d.Allowed {
			t.Fatalf("two holders of two: %+v, %v; want denied", d, err)
		}
	})
}
