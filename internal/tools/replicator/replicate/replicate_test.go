package replicate

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// TestReplicateLastWriterWins: two tables on one server stand for two
// regions. A change reaches the other replica exactly a lag after it was
// seen, not before; a copy is not copied back; when both regions change
// one item within the lag, both end with the later change (the earlier is
// lost, as in a Global Table); deletions replicate.
func TestReplicateLastWriterWins(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		ctx := context.Background()
		client, ta, _ := ddbtest.Table(t, srv)
		_, tb, _ := ddbtest.Table(t, srv)
		now := time.Unix(1_700_000_000, 0)
		r, err := New(Config{A: Replica{Client: client, Table: ta}, B: Replica{Client: client, Table: tb}, Lag: time.Second, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		put := func(table, pk, v string) {
			t.Helper()
			if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
				ddb.AttrPK: &types.AttributeValueMemberS{Value: pk}, "v": &types.AttributeValueMemberS{Value: v},
			}}); err != nil {
				t.Fatal(err)
			}
		}
		get := func(table, pk string) string {
			t.Helper()
			out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{ddb.AttrPK: &types.AttributeValueMemberS{Value: pk}}})
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := out.Item["v"].(*types.AttributeValueMemberS); ok {
				return v.Value
			}
			return ""
		}
		step := func(d time.Duration) {
			t.Helper()
			now = now.Add(d)
			if err := r.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
		put(ta, "x", "a1")
		step(0)
		step(999 * time.Millisecond)
		if got := get(tb, "x"); got != "" {
			t.Errorf("b holds %q before the lag, want nothing", got)
		}
		step(time.Millisecond)
		if got := get(tb, "x"); got != "a1" {
			t.Errorf("b holds %q after the lag, want a1", got)
		}
		step(2 * time.Second)
		if st := r.Stats(); st.Copied["a"] != 1 || st.Copied["b"] != 0 {
			t.Errorf("Stats = %+v, want one copy from a and none back", st)
		}

		// Both regions write y within the lag: b's is the later.
		put(ta, "y", "a")
		step(0)
		step(100 * time.Millisecond)
		put(tb, "y", "b")
		step(100 * time.Millisecond)
		step(2 * time.Second)
		if ga, gb := get(ta, "y"), get(tb, "y"); ga != "b" || gb != "b" {
			t.Errorf("after a conflict: a holds %q, b holds %q; want b's write in both", ga, gb)
		}
		if st := r.Stats(); st.Superseded != 1 {
			t.Errorf("Stats = %+v, want one change lost to last writer wins", st)
		}

		if _, err := client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(ta),
			Key: map[string]types.AttributeValue{ddb.AttrPK: &types.AttributeValueMemberS{Value: "x"}}}); err != nil {
			t.Fatal(err)
		}
		step(0)
		step(time.Second)
		if got := get(tb, "x"); got != "" {
			t.Errorf("b holds %q after a's deletion replicated, want nothing", got)
		}
	})
}
