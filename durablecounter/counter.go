package durablecounter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit"
)

// Config configures a Counter.
type Config struct {
	// Policy is the policy the Counter enforces. Required. New reads its
	// Name, Strategy (empty or durable), Algorithm (default fixed-window),
	// Limit, Window and Shards once; later changes to it have no effect.
	Policy *edgelimit.Policy
	// Store keeps the counts; default a MemoryStore shared by every Counter
	// in the process built without a Store (so they can be batched).
	Store Store
	// Now is the Counter's clock; default time.Now.
	Now func() time.Time
}

// Counter is an exact rate limiter for one policy: however many instances
// and goroutines ask at once, it admits at most Limit cost units per window
// and denies nothing that fits. Every decision is one conditional write to
// its Store. A Counter is safe for concurrent use.
type Counter struct {
	name  string
	limit int64
	store Store
	now   func() time.Time
	alg   algorithm
}

var (
	_ edgelimit.Limiter      = (*Counter)(nil)
	_ edgelimit.BatchLimiter = (*Counter)(nil)
	_ edgelimit.Refunder     = (*Counter)(nil)
)

// algorithm is one counting algorithm (one file each). It turns a request
// into a store operation and the operation's result into a Decision; the
// Counter and the stores do the rest.
type algorithm interface {
	// plan returns the operation that decides a request of cost units for
	// key at now.
	plan(key string, cost int64, now time.Time) op
	// decide turns the result of o, planned at now, into a Decision. (o is
	// passed by value: a pointer through an interface would move every
	// decision's op to the heap.)
	decide(o op, r result, now time.Time) edgelimit.Decision
}

// algorithms maps a policy's algorithm to its constructor.
var algorithms = map[string]func(p params) algorithm{
	edgelimit.AlgorithmFixedWindow: newFixedWindow,
}

// params are the policy fields an algorithm uses.
type params struct {
	name   string
	limit  int64
	window time.Duration
}

var defaultStore = sync.OnceValue(func() *MemoryStore { return NewMemoryStore(MemoryConfig{}) })

// New validates cfg and returns a Counter.
func New(cfg Config) (*Counter, error) {
	p := cfg.Policy
	if p == nil {
		return nil, fmt.Errorf("%w: Policy is required", ErrConfig)
	}
	if p.Name == "" || strings.ContainsRune(p.Name, '#') {
		return nil, fmt.Errorf("%w: policy name %q must be non-empty and without '#'", ErrConfig, p.Name)
	}
	if p.Strategy != "" && p.Strategy != edgelimit.StrategyDurable {
		return nil, fmt.Errorf("%w: policy %q: strategy %q is not %s", ErrConfig, p.Name, p.Strategy, edgelimit.StrategyDurable)
	}
	if p.Limit < 0 {
		return nil, fmt.Errorf("%w: policy %q: limit %d is negative", ErrConfig, p.Name, p.Limit)
	}
	if p.Window < time.Millisecond || p.Window%time.Millisecond != 0 {
		return nil, fmt.Errorf("%w: policy %q: window %s must be a whole number of milliseconds, at least 1ms", ErrConfig, p.Name, p.Window)
	}
	if p.Shards > 1 {
		return nil, fmt.Errorf("%w: policy %q: shards %d: this version keeps one item per key; use shards: 1", ErrConfig, p.Name, p.Shards)
	}
	alg := p.Algorithm
	if alg == "" {
		alg = edgelimit.AlgorithmFixedWindow
	}
	newAlg, ok := algorithms[alg]
	if !ok {
		switch alg {
		case edgelimit.AlgorithmSlidingWindow, edgelimit.AlgorithmSlidingLog, edgelimit.AlgorithmGCRA:
			return nil, fmt.Errorf("%w: policy %q: %s is not implemented yet; use %s", ErrUnsupportedAlgorithm, p.Name, alg, edgelimit.AlgorithmFixedWindow)
		}
		return nil, fmt.Errorf("%w: policy %q: unknown algorithm %q", ErrUnsupportedAlgorithm, p.Name, alg)
	}
	c := &Counter{
		name:  p.Name,
		limit: p.Limit,
		store: cfg.Store,
		now:   cfg.Now,
		alg:   newAlg(params{name: p.Name, limit: p.Limit, window: p.Window}),
	}
	if c.store == nil {
		c.store = defaultStore()
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Allow decides req: it spends req.Units() of the key's quota if they fit
// and reports the quota left. A denial spends nothing. An error means the
// store failed; the engine then applies the policy's on_store_error.
func (c *Counter) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if req.Key == "" {
		return edgelimit.Decision{}, ErrNoKey
	}
	now := c.now()
	o := c.alg.plan(req.Key, req.Units(), now)
	r := result{known: true} // limit 0: denied without asking the store
	if c.limit > 0 {
		var err error
		if r, err = c.store.apply(ctx, now, o); err != nil {
			return edgelimit.Decision{}, err
		}
	}
	d := c.alg.decide(o, r, now)
	d.Policy = c.name
	return d, nil
}

// Refund gives back the units an allowed req spent, as the engine does when
// another policy on the route denies the request. It never takes a count
// below zero, and is a no-op when nothing of req's size is left to give
// back. It refunds the window that contains the current time: a refund that
// arrives after the window of its Allow has ended gives nothing back to the
// old window (which no longer matters) but may give up to the request's cost
// to the new one.
func (c *Counter) Refund(ctx context.Context, req edgelimit.Request) error {
	if req.Key == "" {
		return ErrNoKey
	}
	if c.limit == 0 {
		return nil
	}
	now := c.now()
	return c.store.refund(ctx, now, c.alg.plan(req.Key, req.Units(), now))
}

// BatchKey identifies the Counter's Store: Counters with equal keys can be
// decided together by AllowBatch.
func (c *Counter) BatchKey() string { return c.store.batchKey() }

// AllowBatch decides several requests, each against its own Counter, all or
// nothing: either every decision is allowed and every request spent its
// units, or nothing was spent; then every member whose quota was exceeded
// is denied and the others are reported allowed with their quota without
// this request. Every member must be a *Counter on c's Store, each policy
// at most once. The batch is decided at one instant, read from c's clock.
//
// On a MemoryStore the batch is decided under the members' shard locks; on
// a DynamoStore with one TransactWriteItems, or, on a server without
// transactions, as documented at TransactionMode.
func (c *Counter) AllowBatch(ctx context.Context, items []edgelimit.BatchItem) ([]edgelimit.Decision, error) {
	if len(items) == 0 {
		return nil, nil
	}
	now := c.now()
	members := make([]*Counter, len(items))
	ops := make([]op, len(items))
	for i, it := range items {
		m, ok := it.Limiter.(*Counter)
		if !ok || m == nil {
			return nil, fmt.Errorf("%w: member %d is a %T, not a *durablecounter.Counter", ErrBatch, i, it.Limiter)
		}
		if m.store != c.store {
			return nil, fmt.Errorf("%w: policy %q is on another store", ErrBatch, m.name)
		}
		if slices.ContainsFunc(members[:i], func(o *Counter) bool { return o.name == m.name }) {
			return nil, fmt.Errorf("%w: policy %q appears twice", ErrBatch, m.name)
		}
		if it.Request.Key == "" {
			return nil, fmt.Errorf("policy %q: %w", m.name, ErrNoKey)
		}
		members[i] = m
		ops[i] = m.alg.plan(it.Request.Key, it.Request.Units(), now)
	}
	res := make([]result, len(items))
	committed, err := c.store.applyAll(ctx, now, ops, res)
	if err != nil {
		return nil, err
	}
	out := make([]edgelimit.Decision, len(items))
	denied := false
	for i, m := range members {
		out[i] = m.alg.decide(ops[i], res[i], now)
		out[i].Policy = m.name
		denied = denied || !out[i].Allowed
	}
	if !committed && !denied {
		return nil, fmt.Errorf("durablecounter: batch of %d was not committed, yet no member was denied", len(items))
	}
	return out, nil
}
