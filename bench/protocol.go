package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddb"
)

// ProtocolData is the result of the protocol part.
type ProtocolData struct {
	Server  string        `json:"server"`
	Window  string        `json:"window"`
	Retries int           `json:"retries"`
	TimeCap string        `json:"time_cap"`
	Runs    []ProtocolRun `json:"runs"`
	// Moto are the runs against moto, when it was started.
	Moto []ProtocolRun `json:"moto,omitempty"`
	// Unavailable lists protocols this build could not run, with why.
	Unavailable map[string]string `json:"unavailable,omitempty"`
}

// ProtocolRun is one protocol at one concurrency on one key set.
type ProtocolRun struct {
	Server    string `json:"server"`
	Protocol  string `json:"protocol"` // one-write, one-write+deny-cache, batch, rtw-retry, rtw-once, rtw-blind
	Label     string `json:"label"`
	Algorithm string `json:"algorithm"`
	Scenario  string `json:"scenario"` // hot (one key) or spread (1,000 keys)
	Keys      int    `json:"keys"`
	Clients   int    `json:"clients"`
	Limit     int64  `json:"limit"`
	Offered   int    `json:"offered"`

	Decisions int64   `json:"decisions"`
	Allowed   int64   `json:"allowed"`
	Denied    int64   `json:"denied"`
	Errors    int64   `json:"errors"`
	Seconds   float64 `json:"seconds"`
	PerSec    float64 `json:"per_sec"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	// Truncated: the time cap stopped the run before every decision was made.
	Truncated bool `json:"truncated"`
	// Skipped: the part's time budget was spent before this run began.
	Skipped bool `json:"skipped,omitempty"`

	// Calls counts store calls and request units, in all and split by the
	// outcome of the decision that made them.
	Calls        Snapshot `json:"calls"`
	AllowedCalls Snapshot `json:"allowed_calls"`
	DeniedCalls  Snapshot `json:"denied_calls"`

	// FalseAllows: admissions beyond a key's limit, summed over keys.
	FalseAllows int64 `json:"false_allows"`
	// SpuriousDenials: quota left unspent on a key although at least that
	// many of its requests were denied, summed over keys:
	// sum(max(0, min(decided_k, limit) - allowed_k)).
	SpuriousDenials int64 `json:"spurious_denials"`
	// Conflicts: failed version checks of read-then-write.
	Conflicts int64 `json:"conflicts,omitempty"`
}

// CallsPerDecision is the mean number of store calls per decision.
func (r ProtocolRun) CallsPerDecision() float64 {
	if r.Decisions == 0 {
		return 0
	}
	return float64(r.Calls.Total()) / float64(r.Decisions)
}

// protoDecider decides one request for key.
type protoDecider interface {
	decide(ctx context.Context, key string) (bool, error)
}

type counterDecider struct{ c *durablecounter.Counter }

func (d counterDecider) decide(ctx context.Context, key string) (bool, error) {
	dec, err := d.c.Allow(ctx, edgelimit.Request{Key: key})
	return dec.Allowed, err
}

// baselineRetries is how often read-then-write retries a lost race.
const baselineRetries = 5

// protoScenarios: one hot key with a limit of 250 offered 500 requests,
// and 1,000 keys with a limit of 1 offered 2 requests each (the two a
// thousand decisions apart: requests to distinct keys, as from many clients).
var protoScenarios = []protoScenario{
	{"hot", 1, 250, 500},
	{"spread", 1000, 1, 2000},
}

// protoClients are the concurrencies of the main protocols (fixed window
// and the baselines); the other algorithms and the deny cache run at the
// extremes only, to keep `make bench` within its time.
var (
	protoClients     = []int{1, 8, 64}
	secondaryClients = []int{1, 64}
)

// protocol is one way of deciding, built fresh for each run.
type protocol struct {
	id, label, alg string
	make           func(ns string, limit int64) (protoDecider, func() int64, error)
	secondary      bool
}

// protoScenario is one key set.
type protoScenario struct {
	name    string
	keys    int
	limit   int64
	offered int
}

// motoScenarios are smaller: moto answers one request at a time.
var motoScenarios = []protoScenario{
	{"hot", 1, 50, 100},
	{"spread", 100, 1, 200},
}

// protoServer is one DynamoDB-API server with a fresh table.
type protoServer struct {
	name   string
	client *dynamodb.Client
	table  string
	store  *dynamostore.Store
	now    func() time.Time
}

// Every decision of the part happens at one instant, inside one window:
// the counts measure the protocols, not window boundaries.
const protoWindow = time.Hour

func newProtoServer(ctx context.Context, name, endpoint string, now func() time.Time) (*protoServer, error) {
	client, _, err := countingClient(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	table := fmt.Sprintf("bench-protocol-%d", time.Now().UnixNano())
	if err := ddb.CreateTable(ctx, client, table); err != nil {
		return nil, err
	}
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
	if err != nil {
		return nil, err
	}
	return &protoServer{name: name, client: client, table: table, store: store, now: now}, nil
}

// counter returns a Counter of a fresh policy named ns on s.
func (s *protoServer) counter(ns, alg string, limit int64, denyCache bool) (*durablecounter.Counter, error) {
	p, err := benchPolicy(fmt.Sprintf("  - {name: %s, routes: [\"GET /\"], key: ip, strategy: durable, algorithm: %s, limit: %d, window: %s, deny_cache: %t}",
		ns, alg, limit, protoWindow, denyCache))
	if err != nil {
		return nil, err
	}
	return durablecounter.New(durablecounter.Config{Policy: p, Store: s.store, Now: s.now})
}

func (s *protoServer) oneWrite(alg string, denyCache bool) func(string, int64) (protoDecider, func() int64, error) {
	return func(ns string, limit int64) (protoDecider, func() int64, error) {
		c, err := s.counter(ns, alg, limit, denyCache)
		if err != nil {
			return nil, nil, err
		}
		return counterDecider{c}, nil, nil
	}
}

// batch decides each request against two fixed-window policies of the same
// limit at once (Counter.AllowBatch: TransactWriteItems where the server
// has it), as the engine does for a route guarded by two durable policies.
func (s *protoServer) batch(ns string, limit int64) (protoDecider, func() int64, error) {
	a, err := s.counter(ns+"a", string(durablecounter.FixedWindow), limit, false)
	if err != nil {
		return nil, nil, err
	}
	b, err := s.counter(ns+"b", string(durablecounter.FixedWindow), limit, false)
	if err != nil {
		return nil, nil, err
	}
	return batchDecider{a, b}, nil, nil
}

type batchDecider struct{ a, b *durablecounter.Counter }

func (d batchDecider) decide(ctx context.Context, key string) (bool, error) {
	ds, err := d.a.AllowBatch(ctx, []edgelimit.BatchItem{
		{Limiter: d.a, Request: edgelimit.Request{Key: key}},
		{Limiter: d.b, Request: edgelimit.Request{Key: key}},
	})
	if err != nil {
		return false, err
	}
	return ds[0].Allowed && ds[1].Allowed, nil
}

func (s *protoServer) readThenWrite(conditional bool, retries int) func(string, int64) (protoDecider, func() int64, error) {
	return func(ns string, limit int64) (protoDecider, func() int64, error) {
		r := &readThenWrite{client: s.client, table: s.table, prefix: "rtw#" + ns + "#", limit: limit, window: protoWindow,
			now: s.now, conditional: conditional, retries: retries}
		return r, r.conflicts.Load, nil
	}
}

func runProtocol(ctx context.Context, o options) (any, error) {
	if o.dynalite == "" {
		return nil, errors.New("no dynalite endpoint: run under `go run ./internal/tools/testservers -only dynalite --` or set -dynalite")
	}
	// Each run stops after timeCap; runs that would start after the
	// budget of their server are skipped (and reported), so that the part
	// ends in bounded time however slow the machine is.
	timeCap, dynaliteBudget, motoBudget := 10*time.Second, 180*time.Second, 75*time.Second
	if o.quick {
		timeCap, dynaliteBudget, motoBudget = 3*time.Second, 90*time.Second, 30*time.Second
	}
	t0 := time.Now()
	now := func() time.Time { return t0 }
	data := ProtocolData{Server: "dynalite", Window: protoWindow.String(), Retries: baselineRetries, TimeCap: timeCap.String(), Unavailable: map[string]string{}}

	dl, err := newProtoServer(ctx, "dynalite", o.dynalite, now)
	if err != nil {
		return nil, err
	}
	var protos []protocol
	for _, alg := range durableAlgorithms {
		id := "one-write"
		if _, err := dl.counter("probe", alg, 1, false); err != nil {
			data.Unavailable[id+" "+alg] = err.Error()
			logf("protocol: %s %s unavailable: %v", id, alg, err)
			continue
		}
		protos = append(protos, protocol{id, "edgelimit: one conditional write (" + alg + ")", alg, dl.oneWrite(alg, false), alg != string(durablecounter.FixedWindow)})
	}
	for _, alg := range []string{string(durablecounter.FixedWindow), string(durablecounter.GCRA)} {
		if _, err := dl.counter("probe", alg, 1, true); err == nil {
			protos = append(protos, protocol{"one-write+deny-cache", "edgelimit: one conditional write + deny cache (" + alg + ")", alg, dl.oneWrite(alg, true), true})
		}
	}
	protos = append(protos,
		protocol{"rtw-retry", fmt.Sprintf("baseline: read, then conditional write, ≤%d retries", baselineRetries), string(durablecounter.FixedWindow), dl.readThenWrite(true, baselineRetries), false},
		protocol{"rtw-once", "baseline: read, then conditional write, no retry", string(durablecounter.FixedWindow), dl.readThenWrite(true, 0), false},
		protocol{"rtw-blind", "baseline: read, then unconditional write", string(durablecounter.FixedWindow), dl.readThenWrite(false, 0), false},
	)
	n := 0
	budget := time.Now().Add(dynaliteBudget)
	for _, p := range protos {
		for _, sc := range protoScenarios {
			clientSet := protoClients
			if p.secondary {
				clientSet = secondaryClients
			}
			for _, clients := range clientSet {
				run, err := runOne(ctx, "dynalite", p, sc, clients, &n, timeCap, budget)
				if err != nil {
					return nil, err
				}
				data.Runs = append(data.Runs, run)
			}
		}
	}

	// moto implements what dynalite lacks (ReturnValuesOnConditionCheckFailure,
	// TransactWriteItems), as DynamoDB does: the call counts of the cost model
	// come from it when it runs.
	if ep := os.Getenv("EDGELIMIT_MOTO_ENDPOINT"); ep != "" {
		mt, err := newProtoServer(ctx, "moto", ep, now)
		if err != nil {
			return nil, err
		}
		var mprotos []protocol
		for _, alg := range durableAlgorithms {
			if _, err := mt.counter("probe", alg, 1, false); err == nil {
				mprotos = append(mprotos, protocol{"one-write", "edgelimit: one conditional write (" + alg + ")", alg, mt.oneWrite(alg, false), false})
			}
		}
		mprotos = append(mprotos,
			protocol{"batch", "edgelimit: two fixed-window policies on one route (AllowBatch)", string(durablecounter.FixedWindow), mt.batch, false},
			protocol{"rtw-once", "baseline: read, then conditional write, no retry", string(durablecounter.FixedWindow), mt.readThenWrite(true, 0), false})
		budget := time.Now().Add(motoBudget)
		for _, p := range mprotos {
			for _, sc := range motoScenarios {
				run, err := runOne(ctx, "moto", p, sc, 1, &n, timeCap, budget)
				if err != nil {
					return nil, err
				}
				data.Moto = append(data.Moto, run)
			}
		}
	} else {
		logf("protocol: EDGELIMIT_MOTO_ENDPOINT not set: no moto runs (the cost model then uses dynalite's call counts)")
	}
	return data, nil
}

// runOne runs protocol p on one scenario with clients concurrent clients,
// for at most timeCap and not past budget.
func runOne(ctx context.Context, server string, p protocol, sc protoScenario, clients int, n *int, timeCap time.Duration, budget time.Time) (ProtocolRun, error) {
	if err := ctx.Err(); err != nil {
		return ProtocolRun{}, err
	}
	left := time.Until(budget)
	if left < time.Second {
		logf("protocol: %-8s %-62s %-6s c=%-2d skipped: the part's time budget is spent", server, p.label, sc.name, clients)
		return ProtocolRun{Server: server, Protocol: p.id, Label: p.label, Algorithm: p.alg, Scenario: sc.name, Keys: sc.keys,
			Clients: clients, Limit: sc.limit, Offered: sc.offered, Skipped: true}, nil
	}
	timeCap = min(timeCap, left)
	*n++
	ns := fmt.Sprintf("p%d", *n)
	d, conflicts, err := p.make(ns, sc.limit)
	if err != nil {
		return ProtocolRun{}, fmt.Errorf("%s: %w", p.label, err)
	}
	run := ProtocolRun{Server: server, Protocol: p.id, Label: p.label, Algorithm: p.alg, Scenario: sc.name, Keys: sc.keys,
		Clients: clients, Limit: sc.limit, Offered: sc.offered}
	drive(ctx, d, &run, ns, timeCap)
	if conflicts != nil {
		run.Conflicts = conflicts()
	}
	logf("protocol: %-8s %-62s %-6s c=%-2d %6.0f/s p50 %6.0fµs p99 %7.0fµs calls/dec %.2f false %d spurious %d",
		server, p.label, sc.name, clients, run.PerSec, run.P50us, run.P99us, run.CallsPerDecision(), run.FalseAllows, run.SpuriousDenials)
	return run, nil
}

// drive makes run.Offered decisions with run.Clients concurrent clients,
// decision i for key i mod run.Keys, and fills in the results.
func drive(ctx context.Context, d protoDecider, run *ProtocolRun, ns string, timeCap time.Duration) {
	keys := make([]string, run.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-key-%06d", ns, i)
	}
	allowedK := make([]atomic.Int64, run.Keys)
	decidedK := make([]atomic.Int64, run.Keys)
	var next atomic.Int64
	var mu sync.Mutex
	var lats []time.Duration
	allowedCalls, deniedCalls := NewTally(), NewTally()
	var allowed, denied, errs atomic.Int64
	start := time.Now()
	deadline := start.Add(timeCap)
	var wg sync.WaitGroup
	for range run.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for {
				i := int(next.Add(1) - 1)
				if i >= run.Offered || ctx.Err() != nil {
					break
				}
				if time.Now().After(deadline) {
					mu.Lock()
					run.Truncated = true
					mu.Unlock()
					break
				}
				k := i % run.Keys
				t := NewTally()
				t0 := time.Now()
				ok, err := d.decide(withTally(ctx, t), keys[k])
				mine = append(mine, time.Since(t0))
				snap := t.Snapshot()
				switch {
				case err != nil:
					errs.Add(1)
					continue
				case ok:
					allowed.Add(1)
					allowedK[k].Add(1)
					allowedCalls.merge(snap)
				default:
					denied.Add(1)
					deniedCalls.merge(snap)
				}
				decidedK[k].Add(1)
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	run.Seconds = time.Since(start).Seconds()
	run.Allowed, run.Denied, run.Errors = allowed.Load(), denied.Load(), errs.Load()
	run.Decisions = run.Allowed + run.Denied
	run.PerSec = float64(run.Decisions) / run.Seconds
	slices.Sort(lats)
	run.P50us = micros(percentile(lats, 0.50))
	run.P99us = micros(percentile(lats, 0.99))
	run.AllowedCalls, run.DeniedCalls = allowedCalls.Snapshot(), deniedCalls.Snapshot()
	run.Calls = run.AllowedCalls.Add(run.DeniedCalls)
	for k := range keys {
		a, dk := allowedK[k].Load(), decidedK[k].Load()
		run.FalseAllows += max(0, a-run.Limit)
		run.SpuriousDenials += max(0, min(dk, run.Limit)-a)
	}
}

// merge adds a snapshot's counts to t.
func (t *Tally) merge(s Snapshot) {
	t.mu.Lock()
	for k, v := range s.Calls {
		t.calls[k] += v
	}
	t.rru += s.RRU
	t.wru += s.WRU
	t.mu.Unlock()
}

// percentile returns the q-quantile of sorted by the nearest-rank method
// (the smallest value at least q of the samples do not exceed), or 0.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
