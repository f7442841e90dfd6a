package dynamostore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/bans"
	"github.com/edgelimit/edgelimit/bans/dynamostore"
	"github.com/edgelimit/edgelimit/internal/banrule"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	ddbsetup "github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
)

func sameState(a, b banrule.State) bool {
	return a.Denials == b.Denials && a.Level == b.Level && a.Since.Equal(b.Since) && a.Until.Equal(b.Until)
}

var rule = banrule.Rule{After: 3, Within: 10 * time.Minute, For: 15 * time.Minute, Growth: 2, Max: time.Hour, Decay: 2 * time.Hour}

// The DynamoDB store and the memory store answer the same sequence the
// same way, on every server, each call costing what the package says.
func TestStoreAgainstMemory(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		client, table, calls := ddbtest.Table(t, srv)
		now := limitertest.T0
		clock := func() time.Time { return now }
		db, err := dynamostore.New(dynamostore.Config{Client: client, Table: table, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		mem := bans.NewMemory(clock)
		ctx := context.Background()
		k := banrule.Key{Policy: "api", Key: "abcdefghijklmnopqrstuv"}
		deny := func(at time.Duration, started bool) {
			t.Helper()
			now = limitertest.T0.Add(at)
			a, err1 := db.CountDenial(ctx, k, rule, now)
			b, err2 := mem.CountDenial(ctx, k, rule, now)
			if err1 != nil || err2 != nil || a.Started != b.Started || !sameState(a.State, b.State) || a.Started != started {
				t.Fatalf("denial at +%s: dynamodb %+v %v, memory %+v %v; want started %v", at, a, err1, b, err2, started)
			}
			x, err1 := db.ReadBan(ctx, k)
			y, err2 := mem.ReadBan(ctx, k)
			if err1 != nil || err2 != nil || !sameState(x, y) || !sameState(x, a.State) {
				t.Fatalf("read at +%s: dynamodb %+v %v, memory %+v %v, the denial said %+v", at, x, err1, y, err2, a.State)
			}
		}
		if st, err := db.ReadBan(ctx, k); err != nil || !sameState(st, banrule.State{}) {
			t.Fatalf("empty: %+v, %v", st, err)
		}
		deny(0, false)
		deny(time.Minute, false)
		calls.Reset()
		deny(2*time.Minute, true) // 15m
		if got := calls.Op("UpdateItem"); got != 2 {
			t.Errorf("the denial that bans cost %v calls, want two UpdateItems (and the test's GetItem)", calls.Snapshot())
		}
		calls.Reset()
		deny(3*time.Minute, false) // banned: not counted
		deny(17*time.Minute, false)
		// Banned: two conditions fail, then a read says so; a first
		// denial: the count's condition fails, then one starts it.
		if got := calls.Op("UpdateItem"); got != 4 {
			t.Errorf("a denial of a banned key and a first denial cost %v calls, want four UpdateItems", calls.Snapshot())
		}
		calls.Reset()
		deny(18*time.Minute, false)
		if got := calls.Op("UpdateItem"); got != 1 {
			t.Errorf("a counted denial cost %v calls, want one UpdateItem (and the test's GetItem)", calls.Snapshot())
		}
		deny(19*time.Minute, true) // 30m, level 2
		deny(50*time.Minute, false)
		deny(51*time.Minute, false)
		deny(52*time.Minute, true) // 1h, level 3
		deny(3*time.Hour, false)
		deny(3*time.Hour+time.Second, false)
		deny(3*time.Hour+2*time.Second, true) // capped: 1h
		// Quiet for the decay after the ban's end: a first ban again.
		deny(6*time.Hour+2*time.Second, false)
		deny(6*time.Hour+3*time.Second, false)
		deny(6*time.Hour+4*time.Second, true)
		if st, _ := db.ReadBan(ctx, k); st.Level != 1 || !st.Until.Equal(now.Add(15*time.Minute)) {
			t.Errorf("after the decay: %+v, want level 1 for 15m", st)
		}
		for _, s := range []edgelimit.BanStore{db, mem} {
			if err := s.LiftBan(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		deny(6*time.Hour+5*time.Second, false) // lifted: the count starts over
		// Past the item's expiry, it is absent.
		now = now.Add(rule.Within + rule.Max + rule.Decay + 2*time.Minute)
		if st, err := db.ReadBan(ctx, k); err != nil || !sameState(st, banrule.State{}) {
			t.Errorf("expired item read as %+v, %v", st, err)
		}
	})
}

// TestItem reads the raw item: its pk prefix, the hashed key as given,
// its attributes and its TTL.
func TestItem(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		client, table, _ := ddbtest.Table(t, srv)
		now := limitertest.T0
		db, _ := dynamostore.New(dynamostore.Config{Client: client, Table: table, Now: func() time.Time { return now }})
		k := banrule.Key{Policy: "api", Key: "abcdefghijklmnopqrstuv"}
		for range 3 {
			if _, err := db.CountDenial(context.Background(), k, rule, now); err != nil {
				t.Fatal(err)
			}
		}
		out, err := client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "ban#api#abcdefghijklmnopqrstuv"}}})
		if err != nil || out.Item == nil {
			t.Fatalf("no item at ban#api#<key>: %v", err)
		}
		n := func(name string) string {
			v, _ := out.Item[name].(*types.AttributeValueMemberN)
			if v == nil {
				return ""
			}
			return v.Value
		}
		exp := now.Add(rule.Within + rule.Max + rule.Decay + time.Minute).Unix()
		if n("n") != "0" || n("since_ms") != "0" || n("lvl") != "1" || n("until_ms") != itoa(now.Add(15*time.Minute).UnixMilli()) ||
			n("expires_at") != itoa(exp) {
			t.Errorf("item %v", out.Item)
		}
		// An item the store did not write is an error, never a panic.
		_, err = client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "ban#api#bad"}, "n": &types.AttributeValueMemberS{Value: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ReadBan(context.Background(), banrule.Key{Policy: "api", Key: "bad"}); !errors.Is(err, dynamostore.ErrBadItem) {
			t.Errorf("bad item: %v", err)
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestConcurrentDenials: 64 clients on two stores (two instances) count
// denials of one key at once: none is lost, and exactly the After-th
// starts the ban.
func TestConcurrentDenials(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		c1, table, _ := ddbtest.Table(t, srv)
		c2, _ := ddbtest.Client(t, srv)
		now := limitertest.T0
		clock := func() time.Time { return now }
		s1, _ := dynamostore.New(dynamostore.Config{Client: c1, Table: table, Now: clock})
		s2, _ := dynamostore.New(dynamostore.Config{Client: c2, Table: table, Now: clock})
		stores := []*dynamostore.Store{s1, s2}
		r := rule
		r.After = 40
		k := banrule.Key{Policy: "api", Key: "concurrent-key-0000000"}
		var started atomic.Int64
		run := func(n int) {
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					out, err := stores[i%2].CountDenial(context.Background(), k, r, now)
					if err != nil {
						t.Error(err)
					}
					if out.Started {
						started.Add(1)
					}
				})
			}
			wg.Wait()
		}
		run(39)
		st, err := s1.ReadBan(context.Background(), k)
		if err != nil || st.Denials != 39 || st.Banned(now) || started.Load() != 0 {
			t.Fatalf("after 39 concurrent denials: %+v, %v, %d bans; want 39 counted, no ban", st, err, started.Load())
		}
		run(64)
		st, err = s2.ReadBan(context.Background(), k)
		if err != nil || !st.Banned(now) || st.Level != 1 || started.Load() != 1 {
			t.Fatalf("after 64 more: %+v, %v, %d bans started; want one ban, level 1", st, err, started.Load())
		}
	})
}

// TestEngineBansAfterExactlyN: two engines (two instances) on one table,
// 64 concurrent clients: a key over its quota is banned after exactly N
// denials, and then refused by both with the ban.
func TestEngineBansAfterExactlyN(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		c1, table, _ := ddbtest.Table(t, srv)
		c2, _ := ddbtest.Client(t, srv)
		clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour))
		f, err := policy.Parse("ban.yaml", []byte(`version: 1
policies:
  - name: api
    routes: ["GET /v"]
    key: header:X-Api-Key
    strategy: durable
    algorithm: fixed-window
    deny_cache: false
    limit: 10
    window: 1h
    store_timeout: 10s
    ban: {after: 5, within: 1h, for: 15m, staleness: 1s}
`))
		if err != nil {
			t.Fatal(err)
		}
		engine := func(client *dynamodb.Client) *edgelimit.Engine {
			cfg := ddbsetup.Config{Client: client, Table: table}
			env := setup.BackendEnv{Getenv: func(string) string { return "" }, Now: clock.Now}
			build, err := setup.Limiters(f, []setup.Backend{durable.Backend(cfg)}, env)
			if err != nil {
				t.Fatal(err)
			}
			store, err := setup.Bans(f, []setup.Backend{durable.Backend(cfg)}, env)
			if err != nil {
				t.Fatal(err)
			}
			e, err := edgelimit.New(edgelimit.Config{Policies: f, Limiters: build, Bans: store, Now: clock.Now,
				HashSecret: []byte(strings.Repeat("k", 32)), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		engines := []*edgelimit.Engine{engine(c1), engine(c2)}
		var admitted, denied, banned atomic.Int64
		run := func(n int) {
			var wg sync.WaitGroup
			sem := make(chan struct{}, 64)
			for i := range n {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					v := engines[i%2].Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/v",
						Header: limitertest.Headers(map[string]string{"X-Api-Key": "hammer"})})
					switch {
					case v.Allowed:
						admitted.Add(1)
					case v.Status == 429 && strings.Contains(string(v.Body), `"ban":`):
						banned.Add(1)
					case v.Status == 429:
						denied.Add(1)
					default:
						t.Errorf("status %d: %s", v.Status, v.Body)
					}
					v.Release()
				})
			}
			wg.Wait()
		}
		run(14) // 10 admitted, 4 denials: no ban yet
		info, err := engines[0].Ban(context.Background(), "api", "hammer")
		if err != nil || admitted.Load() != 10 || denied.Load() != 4 || banned.Load() != 0 || info.Banned || info.Denials != 4 {
			t.Fatalf("after 14 requests: %d admitted, %d denied, %d banned, %+v, %v; want 10, 4, 0 and 4 denials counted",
				admitted.Load(), denied.Load(), banned.Load(), info, err)
		}
		run(64)
		info, err = engines[1].Ban(context.Background(), "api", "hammer")
		if err != nil || !info.Banned || info.Level != 1 || !info.Until.Equal(clock.Now().Add(15*time.Minute)) || banned.Load() < 1 {
			t.Fatalf("after 64 more: %+v, %v (%d banned responses); want one ban of 15m", info, err, banned.Load())
		}
		clock.Advance(2 * time.Second) // past every instance's staleness
		before := banned.Load()
		run(64)
		if got := banned.Load() - before; got != 64 {
			t.Errorf("while banned: %d of 64 requests answered with the ban", got)
		}
	})
}
