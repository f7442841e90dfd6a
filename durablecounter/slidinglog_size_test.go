package durablecounter_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// itemSize is an item's size as DynamoDB bills and bounds it: the UTF-8
// length of every attribute name plus its value's size (a number takes
// 1 byte plus 1 per two significant digits, a string its length).
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberN:
			digits := len(v.Value)
			if v.Value[0] == '-' {
				digits--
			}
			n += 1 + (digits+1)/2
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		}
	}
	return n
}

// TestSlidingLogLargestItem writes the largest item a sliding log of the
// largest limit can have (MaxSlidingLogLimit units, each in its own
// millisecond, plus the 15 expired buckets a write may leave unpruned),
// checks that the server stores it (DynamoDB's limit is 400 KB), and
// decides on it. Each decision on such an item consumes as many write
// units as it has kilobytes, denials included.
func TestSlidingLogLargestItem(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		if s.Name == "moto" {
			t.Skip("the size limit is DynamoDB's, checked on dynalite; moto would take seconds per write of this item")
		}
		client, table, calls := ddbtest.Table(t, s)
		const limit = durablecounter.MaxSlidingLogLimit
		clock := limitertest.NewClock(limitertest.T0)
		now := clock.Now()
		// The newest unit one window minus a millisecond before now: the
		// whole log is in the window.
		nowMS := now.UnixMilli()
		first := nowMS - int64(limit) // live: > now - 60s with a window of 1h
		item := map[string]types.AttributeValue{
			"pk":         &types.AttributeValueMemberS{Value: "sl#largest#k"},
			"n":          num(limit + 15),
			"x":          num(1_000_000),
			"g":          num(7_000_000_000_000_000_000),
			"r":          num(3),
			"expires_at": num(now.Add(2*time.Hour).Unix() + 60),
		}
		for k := range int64(limit) {
			item["b"+strconv.FormatInt(first+k, 36)] = num(1)
		}
		for k := range int64(15) { // expired: more than an hour ago
			item["b"+strconv.FormatInt(nowMS-2*3600_000-k, 36)] = num(1)
		}
		size := itemSize(item)
		t.Logf("largest sliding-log item at limit %d: %d bytes (%.0f KB, %d write units a decision)", limit, size, float64(size)/1024, (size+1023)/1024)
		if size > 400*1024 {
			t.Fatalf("the largest item is %d bytes, above DynamoDB's 400 KB", size)
		}
		if _, err := client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatalf("PutItem of the largest item: %v", err)
		}
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		c, err := durablecounter.New(durablecounter.Config{
			Policy: &policy.Policy{Name: "largest", Limit: limit, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.SlidingLog}},
			Store:  store, Now: clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		calls.Reset()
		d, err := c.Allow(context.Background(), edgelimit.Request{Key: "k"})
		if err != nil || d.Allowed || d.Remaining != 0 {
			t.Fatalf("Allow on a full log = %+v, %v; want denied", d, err)
		}
		t.Logf("a denial on it: %v", calls.Snapshot())
		// A unit leaves the window: exactly one more fits, and the write
		// (which also prunes the 15 expired buckets... once there are 16)
		// is accepted at that size.
		clock.Set(time.UnixMilli(first + 3600_000))
		if d, err = c.Allow(context.Background(), edgelimit.Request{Key: "k"}); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("Allow once the oldest unit left = %+v, %v; want allowed with Remaining 0", d, err)
		}
		if d, err = c.Allow(context.Background(), edgelimit.Request{Key: "k"}); err != nil || d.Allowed {
			t.Fatalf("Allow on the full log again = %+v, %v; want denied", d, err)
		}
	})
}
