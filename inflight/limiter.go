package inflight

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight/internal/wire"
	"github.com/edgelimit/edgelimit/policy"
)

// Config configures a Limiter.
type Config struct {
	// Policy is the policy the Limiter enforces. Required. New reads its
	// Name, Strategy (nil or inflight), Limit (how many requests of one
	// key run at once), Window (the lease) and Options once; later changes
	// to it have no effect.
	Policy *policy.Policy
	// Options, if set, are the Limiter's own options; default the Policy's
	// Options (what its file said), else the zero Options.
	Options *Options
	// Store keeps the slots; default a Memory store shared by every
	// Limiter in the process built without a Store.
	Store Store
	// Now is the Limiter's clock. Without it the Limiter decides at the
	// Request's At (the engine reads the instant once for every policy of a
	// request), or at time.Now() when At is zero.
	Now func() time.Time
}

// ReleaseTimeout bounds a release (Finish, Refund) whose context has no
// deadline of its own.
const ReleaseTimeout = time.Second

// Limiter is an in-flight limit for one policy: the requests of one key
// hold at most its limit of slots at once, each its cost (Request.Units:
// the policy's cost, or what the application reserved for it), however
// many instances and goroutines ask, and a take is denied only when its
// units do not fit beside the slots held. A slot
// is taken by Allow before the handler runs and released by Finish after
// it (or by Refund, when another policy of the route denies the request);
// a slot whose holder never releases it (an instance that died mid-request)
// comes back when its lease, the policy's window, ends. A Limiter is safe
// for concurrent use.
type Limiter struct {
	name string
	// prefix is "if#<policy>#", the start of every item's name.
	prefix string
	limit  int64
	lease  time.Duration
	retry  time.Duration
	store  Store
	// clock is Config.Now, or nil: then decisions are at Request.At.
	clock func() time.Time
}

var (
	_ edgelimit.Limiter  = (*Limiter)(nil)
	_ edgelimit.Finisher = (*Limiter)(nil)
	_ edgelimit.Refunder = (*Limiter)(nil)
	_ edgelimit.Peeker   = (*Limiter)(nil)
	_ edgelimit.Quoter   = (*Limiter)(nil)
)

var defaultStore = sync.OnceValue(func() *Memory { return NewMemory(MemoryConfig{}) })

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	p := cfg.Policy
	if p == nil {
		return nil, fmt.Errorf("%w: Policy is required", ErrConfig)
	}
	if p.Name == "" || strings.ContainsRune(p.Name, '#') {
		return nil, fmt.Errorf("%w: policy name %q must be non-empty and without '#'", ErrConfig, p.Name)
	}
	if p.Strategy != nil && p.Strategy != Strategy {
		return nil, fmt.Errorf("%w: policy %q: strategy %q is not %s", ErrConfig, p.Name, p.Strategy.Name, Strategy.Name)
	}
	opts, err := options(cfg)
	if err != nil {
		return nil, err
	}
	switch {
	case p.Limit < 0 || p.Limit > MaxLimit:
		return nil, fmt.Errorf("%w: policy %q: limit %d must be between 0 and %d", ErrConfig, p.Name, p.Limit, MaxLimit)
	case p.Window < time.Millisecond || p.Window%time.Millisecond != 0:
		return nil, fmt.Errorf("%w: policy %q: window (the lease) %s must be a whole number of milliseconds, at least 1ms", ErrConfig, p.Name, p.Window)
	case p.Cost > 1 && p.Limit > 0 && p.Cost > p.Limit:
		return nil, fmt.Errorf("%w: policy %q: cost %d is more than the limit %d: no request could ever hold its slots", ErrCost, p.Name, p.Cost, p.Limit)
	case opts.RetryAfter < 0 || opts.RetryAfter > p.Window:
		return nil, fmt.Errorf("%w: policy %q: retry_after %s must be between 0 and the lease %s", ErrConfig, p.Name, opts.RetryAfter, p.Window)
	}
	l := &Limiter{name: p.Name, prefix: "if#" + p.Name + "#", limit: p.Limit, lease: p.Window,
		retry: opts.RetryAfter, store: cfg.Store, clock: cfg.Now}
	if l.retry == 0 {
		l.retry = min(DefaultRetryAfter, p.Window)
	}
	if l.store == nil {
		l.store = defaultStore()
	}
	return l, nil
}

// Quota returns what every decision tells the client in RateLimit-Policy:
// the limit (q) and the lease (w).
func (l *Limiter) Quota() (int64, time.Duration) { return l.limit, l.lease }

// item returns the name of key's item in the store: "if#<policy>#<key>",
// key being the engine's keyed hash of the client key.
func (l *Limiter) item(key string) string { return l.prefix + key }

// now is the decision instant, Unix nanoseconds.
func (l *Limiter) now(req edgelimit.Request) int64 {
	switch {
	case l.clock != nil:
		return l.clock().UnixNano()
	case !req.At.IsZero():
		return req.At.UnixNano()
	}
	return time.Now().UnixNano()
}

// limits returns the limit and the lease in force for req: the policy's,
// or its tier's or override's (an operator's block is a limit of 0; a
// limit above MaxLimit is held at MaxLimit;
// a lease that is not a whole, positive number of milliseconds is the
// policy's).
func (l *Limiter) limits(req edgelimit.Request) (int64, time.Duration) {
	limit, lease := l.limit, l.lease
	if req.Limits.Limit > 0 {
		limit = min(req.Limits.Limit, MaxLimit)
	}
	if req.Limits.Block { // an operator's block: no slot for the key
		limit = 0
	}
	if w := req.Limits.Window; w >= time.Millisecond && w%time.Millisecond == 0 {
		lease = w
	}
	return limit, lease
}

func (l *Limiter) check(req edgelimit.Request) error {
	if req.Key == "" {
		return ErrNoKey
	}
	return nil
}

// Allow takes req.Units() slots for req, all or none: allowed when the
// holders of req's key hold at most the limit less those units (slots
// whose lease has ended are reclaimed), denied otherwise, never
// spuriously. A request of more units than the limit in force can never
// fit: it is denied, after a read of the key's item for Remaining, with
// RetryAfter the lease. An allowed Decision's Receipt names the holder
// (ID) and its lease's end (Slot, Unix nanoseconds), for Finish or Refund
// with the same Request (its units say what to give back). An error means
// the store failed (the engine applies on_store_error); slots the failed
// call may still have taken come back when their lease ends.
func (l *Limiter) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if err := l.check(req); err != nil {
		return edgelimit.Decision{}, err
	}
	limit, lease := l.limits(req)
	now := l.now(req)
	d := edgelimit.Decision{Policy: l.name, Limit: limit, Window: lease}
	if limit == 0 {
		l.fill(&d, wire.State{}, now, lease, false)
		return d, nil
	}
	units := req.Units()
	if units > limit {
		return l.never(ctx, req, d, now, lease)
	}
	var id wire.SlotID // 128 bits from the runtime's ChaCha8: unique, never shown
	binary.LittleEndian.PutUint64(id[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(id[8:], rand.Uint64())
	expiry := now + int64(lease)
	taken, st, err := l.store.takeSlot(ctx, wire.Take{Item: l.item(req.Key), ID: id, Units: units, Limit: limit, Now: now, Expiry: expiry})
	if err != nil {
		return edgelimit.Decision{}, fmt.Errorf("inflight: policy %q: take: %w", l.name, err)
	}
	l.fill(&d, st, now, lease, taken)
	if taken {
		d.Receipt = edgelimit.Receipt{At: now, Slot: expiry, ID: id}
	}
	return d, nil
}

// fill sets d's Allowed, Remaining, Reset and RetryAfter from the state of
// the key's slots at now.
func (l *Limiter) fill(d *edgelimit.Decision, st wire.State, now int64, lease time.Duration, allowed bool) {
	d.Allowed = allowed
	d.Remaining = max(0, d.Limit-st.Live)
	d.Reset = min(l.retry, lease)
	if st.Live > 0 && st.Earliest > now {
		d.Reset = min(d.Reset, time.Duration(st.Earliest-now))
	}
	if !allowed {
		d.RetryAfter = d.Reset
	}
}

// never denies a request of more units than the limit in force, which no
// release can make fit: Remaining from a read of the key's item,
// RetryAfter the lease (as long as a quota's window, for a request that
// can never fit one).
func (l *Limiter) never(ctx context.Context, req edgelimit.Request, d edgelimit.Decision, now int64, lease time.Duration) (edgelimit.Decision, error) {
	st, err := l.store.slots(ctx, l.item(req.Key), now)
	if err != nil {
		return edgelimit.Decision{}, fmt.Errorf("inflight: policy %q: read: %w", l.name, err)
	}
	l.fill(&d, st, now, lease, false)
	d.RetryAfter = max(lease, d.Reset)
	return d, nil
}

// Peek reports whether req.Units() slots are free for req, and how many
// are, without taking any: one consistent read of the key's item.
func (l *Limiter) Peek(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if err := l.check(req); err != nil {
		return edgelimit.Decision{}, err
	}
	limit, lease := l.limits(req)
	now := l.now(req)
	d := edgelimit.Decision{Policy: l.name, Limit: limit, Window: lease}
	if limit == 0 {
		l.fill(&d, wire.State{}, now, lease, false)
		return d, nil
	}
	if req.Units() > limit {
		return l.never(ctx, req, d, now, lease)
	}
	st, err := l.store.slots(ctx, l.item(req.Key), now)
	if err != nil {
		return edgelimit.Decision{}, fmt.Errorf("inflight: policy %q: read: %w", l.name, err)
	}
	l.fill(&d, st, now, lease, st.Live+req.Units() <= limit)
	return d, nil
}

// Finish releases the slot d took (edgelimit.Finisher): the engine calls it
// once the handler has returned, whatever its status. See Release.
func (l *Limiter) Finish(ctx context.Context, req edgelimit.Request, d edgelimit.Decision, _ int, _ int64) error {
	return l.Release(ctx, req, d)
}

// Refund releases the slot d took (edgelimit.Refunder): the engine calls it
// when another policy of the route denied the request. See Release.
func (l *Limiter) Refund(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	return l.Release(ctx, req, d)
}

// Release gives back exactly the slots d took (d.Receipt.ID, req.Units()
// of them: req must be the Request of the Allow that took them; with other
// units it releases nothing, and the slots come back when the lease ends)
// and no other; a decision that took none (a denial, a peek, a degraded decision)
// releases nothing. Releasing a slot again, or after its lease ended and
// another request reclaimed it, changes nothing and is not an error. It
// ignores ctx's cancellation, keeping its deadline (ReleaseTimeout without
// one): a client that went away mid-request must not keep its slot until
// the lease ends. An error means the release did not land: the slot is
// held until its lease ends.
func (l *Limiter) Release(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	id := wire.SlotID(d.Receipt.ID)
	if id.IsZero() {
		return nil
	}
	if req.Key == "" {
		return ErrNoKey
	}
	rctx := detach(ctx)
	defer rctx.stop()
	if _, err := l.store.releaseSlot(rctx, l.item(req.Key), id, req.Units()); err != nil {
		return fmt.Errorf("inflight: policy %q: release: %w", l.name, err)
	}
	return nil
}

// detach returns ctx without its cancellation but with its deadline, or
// ReleaseTimeout from now when it has none. Like the engine's budget
// context, it starts a timer only when a store waits on Done (the SDK
// does; the memory store only asks Err), so that a release from memory
// costs no timer.
func detach(ctx context.Context) *releaseCtx {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(ReleaseTimeout)
	}
	return &releaseCtx{parent: ctx, deadline: dl}
}

// releaseCtx carries its parent's values and deadline, not its
// cancellation.
type releaseCtx struct {
	parent   context.Context
	deadline time.Time

	mu       sync.Mutex
	inner    context.Context // context.WithDeadline(WithoutCancel(parent), deadline), once started
	cancel   context.CancelFunc
	canceled bool
}

func (c *releaseCtx) started() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancel = context.WithDeadline(context.WithoutCancel(c.parent), c.deadline)
		if c.canceled {
			c.cancel()
		}
	}
	return c.inner
}

func (c *releaseCtx) stop() {
	c.mu.Lock()
	c.canceled = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *releaseCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *releaseCtx) Done() <-chan struct{} { return c.started().Done() }

func (c *releaseCtx) Value(key any) any { return c.parent.Value(key) }

func (c *releaseCtx) Err() error {
	c.mu.Lock()
	inner, canceled := c.inner, c.canceled
	c.mu.Unlock()
	switch {
	case inner != nil:
		return inner.Err()
	case canceled:
		return context.Canceled
	case !time.Now().Before(c.deadline):
		return context.DeadlineExceeded
	}
	return nil
}
