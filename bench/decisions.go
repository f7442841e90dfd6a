package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	"golang.org/x/time/rate"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/signedwindow"
)

// numKeys is the number of distinct client keys every micro-benchmark walks.
const numKeys = 100_000

// durableAlgorithms are the durable strategy's algorithms, in report order;
// the ones this build of durablecounter lacks are reported as unavailable.
var durableAlgorithms = []string{
	string(durablecounter.FixedWindow),
	string(durablecounter.SlidingWindow),
	string(durablecounter.SlidingLog),
	string(durablecounter.GCRA),
}

// DecisionsData is the result of the decisions part.
type DecisionsData struct {
	Keys       int           `json:"keys"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	Benchtime  string        `json:"benchtime"`
	Count      int           `json:"count"`
	Rows       []DecisionRow `json:"rows"`
}

// DecisionRow is one limiter's cost per decision.
type DecisionRow struct {
	Name string `json:"name"`
	// Group is "edgelimit" or "alternative".
	Group string `json:"group"`
	// Setup says how the limiter was configured.
	Setup       string     `json:"setup"`
	Serial      *BenchStat `json:"serial,omitempty"`
	Parallel    *BenchStat `json:"parallel,omitempty"`
	Unavailable string     `json:"unavailable,omitempty"`
}

// BenchStat is the median of Count testing.Benchmark runs.
type BenchStat struct {
	NsPerOp     float64   `json:"ns_per_op"`
	AllocsPerOp int64     `json:"allocs_per_op"`
	BytesPerOp  int64     `json:"bytes_per_op"`
	N           int       `json:"n"`
	Runs        []float64 `json:"runs_ns_per_op"`
	// Unexpected counts decisions that were not what the row measures (a
	// denial in an admission row, or the reverse): it must be 0.
	Unexpected int64 `json:"unexpected"`
}

// microLimiter is one limiter under test: allow decides for key index i
// and reports whether it admitted. allow may be called concurrently for
// distinct i. Every decision of a row is an admission, or with deny set a
// denial.
type microLimiter struct {
	name, group, setup string
	allow              func(ctx context.Context, i int) bool
	deny               bool
	unavailable        string
}

func runDecisions(ctx context.Context, o options) (any, error) {
	testing.Init()
	if err := flag.CommandLine.Set("test.benchtime", o.benchT.String()); err != nil {
		return nil, err
	}
	keys, reqKeys := benchKeys()
	limiters, err := microLimiters(ctx, keys, reqKeys)
	if err != nil {
		return nil, err
	}
	data := DecisionsData{Keys: numKeys, GOMAXPROCS: runtime.GOMAXPROCS(0), Benchtime: o.benchT.String(), Count: o.count}
	for _, l := range limiters {
		row := DecisionRow{Name: l.name, Group: l.group, Setup: l.setup, Unavailable: l.unavailable}
		if l.unavailable == "" {
			row.Serial = measure(ctx, l, false, o.count)
			row.Parallel = measure(ctx, l, true, o.count)
			logf("decisions: %-48s serial %8.0f ns/op %3d allocs   parallel %8.0f ns/op", l.name,
				row.Serial.NsPerOp, row.Serial.AllocsPerOp, row.Parallel.NsPerOp)
		} else {
			logf("decisions: %-48s unavailable: %s", l.name, l.unavailable)
		}
		data.Rows = append(data.Rows, row)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// benchKeys returns numKeys distinct keys hashed as the engine hashes client
// addresses (22 bytes), and fresh copies of them: a request's key never
// shares memory with the stored one, as in production where every request
// hashes its key anew.
func benchKeys() (keys, reqKeys []string) {
	mac := hmac.New(sha256.New, []byte("edgelimit-bench-key-hash-secret-0123456789"))
	keys = make([]string, numKeys)
	reqKeys = make([]string, numKeys)
	for i := range keys {
		mac.Reset()
		fmt.Fprintf(mac, "bench\x00198.51.%d.%d/%d", i>>8&255, i&255, i)
		keys[i] = base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:16])
		reqKeys[i] = strings.Clone(keys[i])
	}
	return keys, reqKeys
}

// measure runs l count times and keeps the median by ns/op. Serial: one
// goroutine walks every key in turn. Parallel: GOMAXPROCS goroutines each
// walk their own share of the keys, so no two decide the same key at once
// (which the signed strategy's token chains need, and which keeps every
// limiter away from one hot key).
func measure(ctx context.Context, l microLimiter, parallel bool, count int) *BenchStat {
	var unexpected atomic.Int64
	var runs []testing.BenchmarkResult
	for range count {
		r := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			if !parallel {
				i := 0
				for b.Loop() {
					if l.allow(ctx, i) == l.deny {
						unexpected.Add(1)
					}
					if i++; i == numKeys {
						i = 0
					}
				}
				return
			}
			p := runtime.GOMAXPROCS(0)
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				g := int(next.Add(1)-1) % p
				lo, hi := g*numKeys/p, (g+1)*numKeys/p
				i := lo
				for pb.Next() {
					if l.allow(ctx, i) == l.deny {
						unexpected.Add(1)
					}
					if i++; i == hi {
						i = lo
					}
				}
			})
		})
		runs = append(runs, r)
	}
	slices.SortFunc(runs, func(a, b testing.BenchmarkResult) int {
		return int(a.NsPerOp()) - int(b.NsPerOp())
	})
	med := runs[len(runs)/2]
	st := &BenchStat{
		NsPerOp:     float64(med.T.Nanoseconds()) / float64(med.N),
		AllocsPerOp: med.AllocsPerOp(),
		BytesPerOp:  med.AllocedBytesPerOp(),
		N:           med.N,
		Unexpected:  unexpected.Load(),
	}
	for _, r := range runs {
		st.Runs = append(st.Runs, float64(r.T.Nanoseconds())/float64(r.N))
	}
	return st
}

// policy parses one policy of a generated policy file, so that every field
// gets the defaults a real policies.yaml gives it.
func benchPolicy(yaml string) (*policy.Policy, error) {
	pf, err := parsePolicies("version: 1\npolicies:\n" + yaml)
	if err != nil {
		return nil, err
	}
	return pf.Policies[0], nil
}

// tokenHeader carries a signed window token in the request header the
// signed strategy reads (the contract's Request.Header).
type tokenHeader string

func (t tokenHeader) Get(name string) string {
	if strings.EqualFold(name, signedwindow.HeaderToken) {
		return string(t)
	}
	return ""
}

// benchSecret is the fixed secret of the signed strategy's key ring and of
// the engine's key hash, so that runs are reproducible.
var benchSecret = []byte("edgelimit-bench-secret-0123456789abcdef")

func benchKeyRing() (*signedwindow.KeyRing, error) {
	k, err := signedwindow.NewKeyFromSecret("bench", benchSecret)
	if err != nil {
		return nil, err
	}
	return signedwindow.NewKeyRing(k)
}

// microLimiters builds every limiter of the comparison, each with a quota
// no run can exhaust, and decides every key once, so that the runs measure
// the steady state (keys known, every decision an admission).
func microLimiters(ctx context.Context, keys, reqKeys []string) ([]microLimiter, error) {
	var out []microLimiter
	add := func(l microLimiter) {
		if l.unavailable == "" {
			for i := range keys {
				l.allow(ctx, i)
			}
		}
		out = append(out, l)
	}

	// edgelimit durable, memory store, one row per algorithm.
	for _, alg := range durableAlgorithms {
		name := "edgelimit durable " + alg + " (memory store)"
		// sliding-log keeps a bucket per admitted millisecond in one item,
		// so its limit per item is bounded; the runs stay far below it.
		limit := "1000000000000"
		if alg == string(durablecounter.SlidingLog) {
			limit = "20000"
		}
		p, err := benchPolicy(fmt.Sprintf("  - {name: bench, routes: [\"GET /\"], key: ip, strategy: durable, algorithm: %s, limit: %s, window: 1h}", alg, limit))
		if err != nil {
			add(microLimiter{name: name, group: "edgelimit", unavailable: "policy: " + err.Error()})
			continue
		}
		c, err := memoryCounters()(p)
		if err != nil {
			add(microLimiter{name: name, group: "edgelimit", unavailable: err.Error()})
			continue
		}
		add(microLimiter{
			name: name, group: "edgelimit",
			setup: "durablecounter.Counter on a durablecounter.Memory, limit " + map[bool]string{true: "20,000", false: "10^12"}[alg == string(durablecounter.SlidingLog)] + " per hour, time.Now",
			allow: func(ctx context.Context, i int) bool {
				d, err := c.Allow(ctx, edgelimit.Request{Key: reqKeys[i]})
				return err == nil && d.Allowed
			},
		})
	}

	// edgelimit kv, cached (and uncached, for scale).
	for _, noCache := range []bool{false, true} {
		name := "edgelimit kv token-bucket (cached)"
		setup := "kvbucket.Bucket on a Memory KV, 10^6/s, burst 10^6, sync every 1h, cache of 200,000 keys, brought past every key's first sync interval before the runs (two passes over the keys, the bucket's clock moved 1h1m ahead between them): decisions stay in the process cache"
		if noCache {
			name = "edgelimit kv token-bucket (uncached, memory KV)"
			setup = "kvbucket.Bucket with NoCache on a Memory KV: a KV read and write per decision, for scale"
		}
		p, err := benchPolicy("  - {name: bench, routes: [\"GET /\"], key: ip, strategy: kv, limit: 1000000, burst: 1000000, window: 1s, sync_interval: 1h}")
		if err != nil {
			return nil, err
		}
		var b edgelimit.Limiter
		if noCache {
			b, err = memoryBuckets(memoryKV(2*numKeys), 2*numKeys, true, nil)(p)
		} else {
			b, _, err = settledBucket(ctx, p, reqKeys)
		}
		if err != nil {
			add(microLimiter{name: name, group: "edgelimit", unavailable: err.Error()})
			continue
		}
		add(microLimiter{
			name: name, group: "edgelimit", setup: setup,
			allow: func(ctx context.Context, i int) bool {
				d, err := b.Allow(ctx, edgelimit.Request{Key: reqKeys[i]})
				return err == nil && d.Allowed
			},
		})
	}

	// edgelimit signed: verify the client's token, spend it in the replay
	// cache, sign the next one.
	{
		name := "edgelimit signed (token verify + re-sign)"
		ring, err := benchKeyRing()
		if err != nil {
			return nil, err
		}
		p, err := benchPolicy("  - {name: bench, routes: [\"GET /\"], key: ip, strategy: signed, limit: 1000000000000, window: 1h}")
		if err != nil {
			return nil, err
		}
		l, err := signedwindow.New(signedwindow.Config{Policy: p, Keys: ring, Replay: pow.NewReplayCache(4 * numKeys)})
		if err != nil {
			add(microLimiter{name: name, group: "edgelimit", unavailable: err.Error()})
		} else {
			tokens := make([]string, numKeys)
			add(microLimiter{
				name: name, group: "edgelimit",
				setup: "signedwindow.Limiter, HS256 tokens, replay cache of 400,000 chains; each client presents the token of its previous response",
				allow: func(ctx context.Context, i int) bool {
					d, _ := l.Allow(ctx, edgelimit.Request{Key: reqKeys[i], Header: tokenHeader(tokens[i])})
					if d.Response != nil {
						tokens[i] = d.Response.Field.Value
					}
					return d.Allowed
				},
			})
		}
	}

	// The whole Lambda middleware: an API Gateway v2 event through
	// middleware.HTTPAPI (route match, key hash, decision, headers) around a
	// handler that does nothing.
	{
		name := "edgelimit middleware.HTTPAPI + durable fixed-window"
		pf, err := parsePolicies("version: 1\npolicies:\n  - {name: bench, routes: [\"GET /search\"], key: ip, strategy: durable, limit: 1000000000000, window: 1h}\n")
		if err != nil {
			return nil, err
		}
		eng, err := newEngine(pf, memoryCounters())
		if err != nil {
			return nil, err
		}
		h := httpAPIMiddleware(eng, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "ok"}, nil
		})
		evs := lambdaEvents()
		add(microLimiter{
			name: name, group: "edgelimit",
			setup: "an API Gateway v2 event per request from one of 100,000 source addresses; engine with its in-process key hash (SipHash-2-4: memory store), RateLimit headers",
			allow: func(ctx context.Context, i int) bool {
				resp, err := h(ctx, evs[i])
				return err == nil && resp.StatusCode == 200
			},
		})
	}

	// The same, for a client over its quota: a 429 with its problem body.
	// The policy allows one request an hour, which every key spent while
	// warming up; repeat denials are answered by the deny cache.
	{
		name := "edgelimit middleware.HTTPAPI + durable fixed-window, denied (429)"
		pf, err := parsePolicies("version: 1\npolicies:\n  - {name: bench, routes: [\"GET /search\"], key: ip, strategy: durable, limit: 1, window: 1h}\n")
		if err != nil {
			return nil, err
		}
		eng, err := newEngine(pf, memoryCounters())
		if err != nil {
			return nil, err
		}
		h := httpAPIMiddleware(eng, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "ok"}, nil
		})
		evs := lambdaEvents()
		for i := range evs { // spend every key's one request
			if _, err := h(ctx, evs[i]); err != nil {
				return nil, err
			}
		}
		add(microLimiter{
			name: name, group: "edgelimit", deny: true,
			setup: "as above with limit 1 per hour, every key already spent: each request is a 429 with RateLimit headers and a problem+json body (deny cache on, the default)",
			allow: func(ctx context.Context, i int) bool {
				resp, err := h(ctx, evs[i])
				return err != nil || resp.StatusCode != 429
			},
		})
	}

	// golang.org/x/time/rate: a limiter per key in a map behind a mutex.
	{
		var mu sync.Mutex
		m := make(map[string]*rate.Limiter, numKeys)
		add(microLimiter{
			name: "golang.org/x/time/rate (map + mutex)", group: "alternative",
			setup: "rate.NewLimiter(10^9/s, burst 2^30) per key, looked up (or created) in a map under a sync.Mutex; Allow() reads time.Now",
			allow: func(ctx context.Context, i int) bool {
				k := reqKeys[i]
				mu.Lock()
				l := m[k]
				if l == nil {
					l = rate.NewLimiter(1e9, 1<<30)
					m[k] = l
				}
				mu.Unlock()
				return l.Allow()
			},
		})
	}

	// github.com/sethvargo/go-limiter: its memorystore.
	{
		st, err := memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: time.Hour})
		if err != nil {
			return nil, err
		}
		add(microLimiter{
			name: "github.com/sethvargo/go-limiter (memorystore)", group: "alternative",
			setup: "memorystore.New(Tokens 2^40, Interval 1h); Take(ctx, key)",
			allow: func(ctx context.Context, i int) bool {
				_, _, _, ok, err := st.Take(ctx, reqKeys[i])
				return err == nil && ok
			},
		})
	}

	// github.com/throttled/throttled/v2: GCRA on its memory store.
	{
		st, err := throttledmem.NewCtx(0)
		if err != nil {
			return nil, err
		}
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(1_000_000), MaxBurst: 1_000_000})
		if err != nil {
			return nil, err
		}
		add(microLimiter{
			name: "github.com/throttled/throttled/v2 (GCRA, memstore)", group: "alternative",
			setup: "NewGCRARateLimiterCtx(memstore.NewCtx(0) — an unbounded map under a RWMutex —, 10^6/s, burst 10^6); RateLimitCtx(ctx, key, 1)",
			allow: func(ctx context.Context, i int) bool {
				limited, _, err := rl.RateLimitCtx(ctx, reqKeys[i], 1)
				return err == nil && !limited
			},
		})
	}
	return out, nil
}

// settledBucket returns a cached kv bucket on a fresh Memory KV (and the
// KV, counting its calls) with every key past its first sync interval, so
// that its decisions are the process cache's as for a hot key. Since issue
// #14 a key's first sync interval in an instance is all reservations, one
// KV call per admission; the bucket's clock is the real one plus an
// offset: one pass over keys starts each key's first interval, the offset
// then moves an interval and a minute ahead, and a second pass syncs each
// key, which grants this instance (the only writer) the whole bucket for
// the interval.
func settledBucket(ctx context.Context, p *policy.Policy, keys []string) (edgelimit.Limiter, *countingKV, error) {
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	kv := &countingKV{KV: memoryKV(2 * len(keys))}
	b, err := kv.factory(2*len(keys), false, now)(p)
	if err != nil {
		return nil, nil, err
	}
	pass := func() error {
		for _, k := range keys {
			if d, err := b.Allow(ctx, edgelimit.Request{Key: k}); err != nil || !d.Allowed {
				return fmt.Errorf("settle the kv bucket: key %s: allowed %v, %v", k, d.Allowed, err)
			}
		}
		return nil
	}
	if err := pass(); err != nil {
		return nil, nil, err
	}
	si, ok := b.(interface{ SyncInterval() time.Duration })
	if !ok {
		return nil, nil, fmt.Errorf("settle the kv bucket: %T has no SyncInterval", b)
	}
	offset.Add(int64(si.SyncInterval() + time.Minute))
	return b, kv, pass()
}

// lambdaEvents returns an API Gateway v2 event of GET /search from each of
// numKeys source addresses.
func lambdaEvents() []events.APIGatewayV2HTTPRequest {
	evs := make([]events.APIGatewayV2HTTPRequest, numKeys)
	for i := range evs {
		evs[i] = events.APIGatewayV2HTTPRequest{
			Version: "2.0", RouteKey: "$default", RawPath: "/search",
			Headers: map[string]string{"host": "bench.local", "user-agent": "bench"},
			RequestContext: events.APIGatewayV2HTTPRequestContext{
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
					Method: "GET", Path: "/search", SourceIP: "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255),
				},
			},
		}
	}
	return evs
}
