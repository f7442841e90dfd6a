package durablecounter_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
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

// TestShards: a global limit of 100 spread over 4 items (shards: 4), hit by
// 64 goroutines with 400 requests: the writes spread over the 4 items, and
// exactly 100 are admitted, none denied while quota was left anywhere (a
// request that meets a full shard tries the others). On memory and dynalite
// for every algorithm; moto serves one call at a time, so it runs the
// claim for one algorithm only.
func TestShards(t *testing.T) {
	t.Parallel()
	type backend struct {
		name  string
		store func(t *testing.T) (durablecounter.Store, func() map[string]int)
		algs  []string
	}
	backends := []backend{{name: "memory", algs: allAlgorithms, store: func(t *testing.T) (durablecounter.Store, func() map[string]int) {
		return durablecounter.NewMemory(durablecounter.MemoryConfig{}), nil
	}}}
	var servers []ddbtest.Server
	t.Run("servers", func(t *testing.T) { servers = ddbtest.Servers(t) })
	for _, s := range servers {
		algs := allAlgorithms
		if s.Name == "moto" {
			algs = []string{string(durablecounter.GCRA)}
		}
		backends = append(backends, backend{name: s.Name, algs: algs, store: func(t *testing.T) (durablecounter.Store, func() map[string]int) {
			client, table, _ := ddbtest.Table(t, s)
			store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return store, func() map[string]int { return itemsByPrefix(t, client, table) }
		}})
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, alg := range b.algs {
				t.Run(alg, func(t *testing.T) {
					store, items := b.store(t)
					clock := limitertest.NewClock(limitertest.T0)
					c, err := durablecounter.New(durablecounter.Config{
						Policy: &policy.Policy{Name: "global", Limit: 100, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), Shards: 4, DenyCache: true}},
						Store:  store, Now: clock.Now,
					})
					if err != nil {
						t.Fatal(err)
					}
					var admitted, deniedEarly atomic.Int64
					err = hammer(400, func(i int) error {
						d, err := c.Allow(context.Background(), edgelimit.Request{Key: "global"})
						if err != nil {
							return err
						}
						if d.Allowed {
							admitted.Add(1)
						} else if admitted.Load() < 100-limitertest.Workers {
							deniedEarly.Add(1) // certainly while quota was left
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					if n := admitted.Load(); n != 100 {
						t.Errorf("admitted %d of 400 with a limit of 100 over 4 shards, want exactly 100", n)
					}
					if n := deniedEarly.Load(); n != 0 {
						t.Errorf("%d requests denied while most of the quota was left", n)
					}
					if items != nil {
						got := items()
						if len(got) != 4 {
							t.Errorf("items written: %v, want 4 (one per shard)", got)
						}
						for pk, n := range got {
							t.Logf("%s: %d", pk, n)
						}
					}
				})
			}
		})
	}
}

// itemsByPrefix scans the table and counts its items by partition key.
func itemsByPrefix(t *testing.T, client *dynamodb.Client, table string) map[string]int {
	t.Helper()
	out := map[string]int{}
	var start map[string]types.AttributeValue
	for {
		res, err := client.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ExclusiveStartKey: start})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range res.Items {
			if v, ok := it["pk"].(*types.AttributeValueMemberS); ok {
				out[v.Value]++
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			return out
		}
		start = res.LastEvaluatedKey
	}
}

// TestShardsTradeOff pins what sharding costs: a request must fit one
// shard's share of the limit (cost 30 of a limit of 100 over 4 shards is
// denied although 100 units are free), and a denial the deny cache does not
// know yet asks every shard. Remaining describes the policy: an admission
// that empties its shard reports what the others have left. A refund goes
// back to the shard its decision spent in.
func TestShardsTradeOff(t *testing.T) {
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	clock := limitertest.NewClock(limitertest.T0)
	c, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "global", Limit: 100, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.FixedWindow, Shards: 4}},
		Store:  store, Now: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, _ := c.Allow(ctx, edgelimit.Request{Key: "g", Cost: 30}); d.Allowed || d.Remaining != 25 || d.Limit != 100 {
		t.Errorf("Allow(cost 30) over 4 shards of 25 = %+v, want denied with Remaining 25 (a shard's share) and Limit 100", d)
	}
	d25, _ := c.Allow(ctx, edgelimit.Request{Key: "g", Cost: 25})
	if !d25.Allowed || d25.Remaining != 75 {
		t.Errorf("Allow(cost 25) = %+v, want allowed with Remaining 75 (the shard is empty: what the others have left)", d25)
	}
	spent := int64(25)
	for range 100 {
		if d, _ := c.Allow(ctx, edgelimit.Request{Key: "g"}); d.Allowed {
			spent++
		}
	}
	if spent != 100 {
		t.Errorf("spent %d, want 100", spent)
	}
	if err := c.Refund(ctx, edgelimit.Request{Key: "g", Cost: 25}, d25); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.Allow(ctx, edgelimit.Request{Key: "g", Cost: 25}); !d.Allowed {
		t.Errorf("Allow(cost 25) after refunding an admission of 25 = %+v, want allowed (the refund went back to its shard)", d)
	}
}

// TestShardedKeysInDynamo pins the partition keys of a sharded policy.
func TestShardedKeysInDynamo(t *testing.T) {
	t.Parallel()
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		if s.Name == "moto" {
			t.Skip("the partition keys are the same on every server; dynalite is faster")
		}
		client, table, _ := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		clock := limitertest.NewClock(limitertest.T0)
		for _, alg := range allAlgorithms {
			c, err := durablecounter.New(durablecounter.Config{
				Policy: &policy.Policy{Name: "hot", Limit: 2, Window: time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg), Shards: 2}},
				Store:  store, Now: clock.Now,
			})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if _, err := c.Allow(context.Background(), edgelimit.Request{Key: "K"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		var pks []string
		for pk := range itemsByPrefix(t, client, table) {
			pks = append(pks, pk)
		}
		slices.Sort(pks)
		got := strings.Join(pks, " ")
		want := "fw#hot#K.0#1699999200 fw#hot#K.1#1699999200 gcra#hot#K.0 gcra#hot#K.1 sl#hot#K.0 sl#hot#K.1 sw#hot#K.0 sw#hot#K.1"
		if got != want {
			t.Errorf("partition keys:\n%s\nwant:\n%s", got, want)
		}
	})
}
