package dynamostore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/policy"
)

func TestUpdateItemRequest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cost     int64
		wantCond string
		wantMax  string
	}{
		{"fits", 3, "attribute_not_exists(n) OR n <= :m", "7"},
		{"cost above limit never fits", 11, "n <= :m", "-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *dynamodb.UpdateItemInput
			f := &fakeDynamo{update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				got = in
				return updated(tc.cost)
			}}
			c, _ := fakeCounter(t, f, 10, dynamostore.TransactionsAuto)
			if _, err := c.Allow(context.Background(), edgelimit.Request{Key: "k", Cost: tc.cost}); err != nil {
				t.Fatal(err)
			}
			if pk := pkOf(got.Key); pk != pk0 {
				t.Errorf("pk = %q, want %q", pk, pk0)
			}
			if e := aws.ToString(got.UpdateExpression); e != "ADD n :d SET expires_at = :e, #g = if_not_exists(#g, :g)" {
				t.Errorf("UpdateExpression = %q", e)
			}
			if c := aws.ToString(got.ConditionExpression); c != tc.wantCond {
				t.Errorf("ConditionExpression = %q, want %q", c, tc.wantCond)
			}
			vals := got.ExpressionAttributeValues
			// expires_at: window end (1700002800) plus the default 1m margin.
			if d, m, e := numOf(t, vals[":d"]), numOf(t, vals[":m"]), numOf(t, vals[":e"]); d != itoa(tc.cost) || m != tc.wantMax || e != "1700002860" {
				t.Errorf(":d, :m, :e = %s, %s, %s; want %d, %s, 1700002860", d, m, e, tc.cost, tc.wantMax)
			}
			// ALL_NEW: n (Remaining = limit - n) and g, the incarnation a
			// refund checks.
			if got.ReturnValues != types.ReturnValueAllNew || got.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
				t.Errorf("ReturnValues %q, ReturnValuesOnConditionCheckFailure %q; want ALL_NEW, ALL_OLD", got.ReturnValues, got.ReturnValuesOnConditionCheckFailure)
			}
			if aws.ToString(got.TableName) != "tbl" {
				t.Errorf("TableName = %q", aws.ToString(got.TableName))
			}
		})
	}
}

func TestSubSecondWindowKey(t *testing.T) {
	var pk string
	f := &fakeDynamo{t: t, update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		pk = pkOf(in.Key)
		return updated(1)
	}}
	store, _ := dynamostore.New(dynamostore.Config{Client: f, Table: "tbl"})
	c := newCounter(t, store, "fast", 5, 1500*time.Millisecond)
	if _, err := c.Allow(context.Background(), edgelimit.Request{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	// 1700000000 s falls in the 1.5 s window starting at 1699999999.5 s:
	// sub-second windows are keyed in milliseconds.
	if want := "fw#fast#k#1699999999500"; pk != want {
		t.Errorf("pk = %q, want %q", pk, want)
	}
}

func TestRefundRequest(t *testing.T) {
	var got *dynamodb.UpdateItemInput
	fail := error(nil)
	refunds := 0
	f := &fakeDynamo{update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		if strings.HasPrefix(aws.ToString(in.UpdateExpression), "ADD n :d") { // the Allow
			return &dynamodb.UpdateItemOutput{Attributes: item(2, 1_700_002_860)}, nil
		}
		got = in
		refunds++
		return &dynamodb.UpdateItemOutput{}, fail
	}}
	c, _ := fakeCounter(t, f, 10, dynamostore.TransactionsAuto)
	req := edgelimit.Request{Key: "k", Cost: 2}
	d, err := c.Allow(context.Background(), req)
	if err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	// A decision that spent nothing has nothing to refund: no call.
	for _, nothing := range []edgelimit.Decision{{}, {Allowed: true}, {Allowed: false, Receipt: d.Receipt}} {
		if err := c.Refund(context.Background(), req, nothing); err != nil || refunds != 0 {
			t.Errorf("Refund(%+v) = %v after %d calls, want nil and no call", nothing, err, refunds)
		}
	}
	if err := c.Refund(context.Background(), req, d); err != nil {
		t.Fatal(err)
	}
	if pk := pkOf(got.Key); pk != pk0 {
		t.Errorf("refund of %s, want the item of the decision's window %s", pk, pk0)
	}
	if e, cond := aws.ToString(got.UpdateExpression), aws.ToString(got.ConditionExpression); e != "ADD n :r" || cond != "n >= :d" {
		t.Errorf("refund = %q if %q, want \"ADD n :r\" if \"n >= :d\"", e, cond)
	}
	if r, d := numOf(t, got.ExpressionAttributeValues[":r"]), numOf(t, got.ExpressionAttributeValues[":d"]); r != "-2" || d != "2" {
		t.Errorf(":r, :d = %s, %s; want -2, 2", r, d)
	}
	fail = conditionFailed(nil)
	refunds = 0
	if err := c.Refund(context.Background(), req, d); err != nil || refunds != 1 {
		t.Errorf("Refund with nothing to give back = %v after %d calls, want nil after 1", err, refunds)
	}
	// A call that fails is retried (within the context), then reported:
	// a refund is never dropped silently.
	fail = &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
	refunds = 0
	if err := c.Refund(context.Background(), req, d); !errors.Is(err, durablecounter.ErrThrottled) || refunds < 2 {
		t.Errorf("Refund when throttled = %v after %d calls, want ErrThrottled after retries", err, refunds)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	refunds = 0
	if err := c.Refund(ctx, req, d); err == nil || refunds != 1 {
		t.Errorf("Refund when throttled with the context done = %v after %d calls, want an error after 1", err, refunds)
	}
}

// TestUpdateExpressions pins each algorithm's one write, as the package
// documentation shows it: the first decision on a new key (no view), and
// one with a view (the reply to the first).
func TestUpdateExpressions(t *testing.T) {
	for _, tc := range []struct {
		alg              string
		reply            map[string]types.AttributeValue
		first, firstIf   string
		second, secondIf string
	}{
		{
			alg:   string(durablecounter.SlidingWindow),
			reply: map[string]types.AttributeValue{"w": &types.AttributeValueMemberN{Value: "472222"}, "c472222": &types.AttributeValueMemberN{Value: "1"}},
			first: "ADD #c :d SET #w = :i, #a = :te, #g = if_not_exists(#g, :gn), expires_at = :e REMOVE #s0", firstIf: "(attribute_not_exists(#w) OR #w <= :i) AND (attribute_not_exists(#c) OR #c <= :m) AND (attribute_not_exists(#p) OR #p <= :pg)",
			second: "ADD #c :d SET #w = :i, #a = :te, #g = if_not_exists(#g, :gn), expires_at = :e REMOVE #s0", secondIf: "(attribute_not_exists(#w) OR #w <= :i) AND (attribute_not_exists(#c) OR #c <= :m) AND (attribute_not_exists(#p) OR #p <= :pg)",
		},
		{
			alg:   string(durablecounter.SlidingLog),
			reply: map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "1"}, "g": &types.AttributeValueMemberN{Value: "42"}, "b" + strconv.FormatInt(t0.UnixMilli()-7200_000, 36): &types.AttributeValueMemberN{Value: "1"}},
			first: "ADD #n :d, #b :d SET #g = if_not_exists(#g, :gn), expires_at = :e", firstIf: "attribute_not_exists(#n) OR #n <= :m",
			// The view shows an expired unit: E = 1, so the condition
			// checks the incarnation and that no refund happened since.
			second: "ADD #n :d, #b :d SET #g = if_not_exists(#g, :gn), expires_at = :e", secondIf: "attribute_not_exists(#n) OR (#n <= :m AND #g = :g0 AND attribute_not_exists(#r))",
		},
		{
			alg:   string(durablecounter.GCRA),
			reply: map[string]types.AttributeValue{"tat": &types.AttributeValueMemberN{Value: strconv.FormatInt(t0.UnixNano()+int64(360*time.Second), 10)}},
			// The idle update records the instant it decided at, and never
			// sets a TAT behind an instant another request was decided at.
			first: "SET #t = :nt, #a = :te, #p = :p, expires_at = :e REMOVE #z", firstIf: "(attribute_not_exists(#t) OR #t <= :te) AND (attribute_not_exists(#a) OR #a <= :te)",
			second: "SET #t = #t + :ct, #a = :te, expires_at = :e", secondIf: "#t > :te AND #t <= :lim",
		},
	} {
		t.Run(tc.alg, func(t *testing.T) {
			var got []*dynamodb.UpdateItemInput
			f := &fakeDynamo{update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				got = append(got, in)
				return &dynamodb.UpdateItemOutput{Attributes: tc.reply}, nil
			}}
			f.t = t
			store, err := dynamostore.New(dynamostore.Config{Client: f, Table: "tbl"})
			if err != nil {
				t.Fatal(err)
			}
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &policy.Policy{Name: "p", Limit: 10, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(tc.alg)}},
				Store:  store, Now: func() time.Time { return t0 },
			})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := c.Allow(context.Background(), edgelimit.Request{Key: "k"}); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != 2 {
				t.Fatalf("%d UpdateItem calls, want 2", len(got))
			}
			for i, want := range [][2]string{{tc.first, tc.firstIf}, {tc.second, tc.secondIf}} {
				if e, c := aws.ToString(got[i].UpdateExpression), aws.ToString(got[i].ConditionExpression); e != want[0] || c != want[1] {
					t.Errorf("update %d: %q if %q, want %q if %q", i+1, e, c, want[0], want[1])
				}
				if got[i].ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
					t.Errorf("update %d without ALL_OLD", i+1)
				}
			}
		})
	}
}
