package edgelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelimit/edgelimit/policy"
)

// A store that stops answering would otherwise tax every request with the
// whole time budget for as long as it is down, and the requests it slows
// keep it saturated as it comes back. The engine keeps a circuit breaker
// per store (not per key), as Envoy's outlier detection and resilience4j
// do: after a few store calls in a row fail or miss their budget, with no
// call answered in time while they were out, it opens, and the policies on
// the store are decided by their on_store_error at once; after a cool-down
// it lets a few probes through (half-open): the first that succeeds closes
// it, and it opens again once all of them failed.
//
// The breaker is a layer around store calls, not a limiter: it only says
// whether a call may take its budget (admit) and hears how the call ended
// (done). An open breaker does not skip the limiter: it calls it with a
// budget already spent, so that what the limiter can answer from memory
// (a deny cache's proven denial, a kv key decided locally) it still
// answers, and whatever needs the store fails at once, without a network
// call.

// BreakerState is the state of a store's circuit breaker.
type BreakerState uint8

const (
	// BreakerClosed: every call asks the store.
	BreakerClosed BreakerState = iota
	// BreakerOpen: no call asks the store; the policies' on_store_error
	// decides (after what the limiters know in memory).
	BreakerOpen
	// BreakerHalfOpen: the cool-down has passed; a probe asks the store,
	// the other calls are decided as while open.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", uint8(s))
}

// BreakerEvent is a change of state of a store's circuit breaker, for
// metrics (Config.ObserveBreaker; metrics.EMF.ObserveBreaker). The engine
// also logs each one.
type BreakerEvent struct {
	// Store names the store: the strategy of its policies ("durable") when
	// they share one store, else strategy/policy ("kv/contact") for a
	// policy whose limiter names no store it shares.
	Store string
	// Policies are the policies on the store, in file order.
	Policies []string
	// State is the new state, From the one before.
	State, From BreakerState
	// Failures is how many calls in a row had failed, when it opens.
	Failures int
	// Err is the failure that opened it (the last of the run, or a
	// failed probe).
	Err error
	// Open is how long the store was not asked freely (open, then
	// half-open), when it closes.
	Open time.Duration
	// At is when it changed, by the engine's clock.
	At time.Time
	// Context is the context of the request whose call changed it.
	Context context.Context
}

// errBreakerOpen is what a limiter called through an open breaker sees in
// context.Cause of its context.
var errBreakerOpen = errors.New("edgelimit: store breaker open")

// ticket is what the breaker allowed one call: its kind in the low two
// bits, and above them the generation it was given in (for pass, the
// breaker's run of successes, see breaker.run; for probe, its half-open
// period), so that done can tell what happened while the call was out.
type ticket uint64

const (
	// pass: the breaker is closed; the call has its budget.
	pass ticket = iota
	// probe: the breaker is half-open and this call probes the store.
	probe
	// refused: the breaker is open (or half-open with its probes taken):
	// the call gets no budget. A refused ticket carries no generation, so
	// it compares equal to refused.
	refused
)

func (tk ticket) kind() ticket { return tk & 3 }
func (tk ticket) gen() uint64  { return uint64(tk) >> 2 }

// budget is the time budget a call with the ticket gets, of the policy's
// d: none when refused.
func (tk ticket) budget(d time.Duration) time.Duration {
	if tk == refused {
		return 0
	}
	return d
}

// callResult is what a call the breaker let through tells about the store.
type callResult uint8

const (
	// neutral: nothing; the limiter answered from memory, or the client
	// went away, or the error was not the store's.
	neutral callResult = iota
	// answered: the store answered.
	answered
	// failed: the store failed or missed the budget.
	failed
)

// run packs, for a closed breaker, the generation of its last success (the
// high bits) and the failures counted since (the low runBits): one word,
// so that a success and a failure landing together cannot lose either.
const (
	runBits = 24
	runMax  = 1<<runBits - 1
)

// breaker is one store's circuit breaker. A closed breaker costs a call
// two atomic loads, and a success or a failure one compare-and-swap; its
// lock is taken only to change state and while it is not closed.
//
// A failure counts against the store only if the store answered no other
// call while it was out (no success since the call was admitted): with
// many calls in flight at once, calls that fail while others are answered
// in time say that those calls were slow (one hot item that many
// concurrent writes queue on, a throttled partition), not that the store
// is down, and opening for them would refuse the store to every key while
// it answers. In particular the calls still in flight when the breaker
// closes, admitted before it opened, cannot open it again.
type breaker struct {
	label    string
	policies []string
	cfg      policy.Breaker
	e        *Engine

	state atomic.Uint32 // BreakerState
	run   atomic.Uint64 // generation<<runBits | failures counted, while closed

	mu sync.Mutex
	// until is when an open breaker may probe; since is when it opened
	// after being closed. In half-open, period numbers the half-open
	// periods (a probe of an earlier one is ignored), probes are the
	// probes in flight and tried the probes that failed.
	until, since  time.Time
	period        uint64
	probes, tried int
}

// admit says whether a call at now may ask the store.
func (b *breaker) admit(ctx context.Context, now time.Time) ticket {
	if b == nil {
		return pass
	}
	if BreakerState(b.state.Load()) == BreakerClosed {
		return b.passTicket()
	}
	b.mu.Lock()
	st := BreakerState(b.state.Load())
	var ev *BreakerEvent
	tk := refused
	switch {
	case st == BreakerClosed:
		tk = b.passTicket()
	case st == BreakerOpen && now.Before(b.until):
	default:
		if st == BreakerOpen {
			b.state.Store(uint32(BreakerHalfOpen))
			b.period++
			b.probes, b.tried = 0, 0
			ev = &BreakerEvent{State: BreakerHalfOpen, From: BreakerOpen, At: now}
		}
		// At most cfg.Probes probes of one half-open period fail: a store
		// still down costs that many budgets per cool-down.
		if b.probes+b.tried < b.cfg.Probes {
			b.probes++
			tk = ticket(b.period<<2) | probe
		}
	}
	b.mu.Unlock()
	b.emit(ctx, ev)
	return tk
}

// passTicket is a pass (kind 0) of the current generation of successes.
func (b *breaker) passTicket() ticket { return ticket(b.run.Load() >> runBits << 2) }

// done records how a call admitted with tk ended.
func (b *breaker) done(ctx context.Context, tk ticket, r callResult, err error) {
	if b == nil || tk == refused || r == neutral {
		if b != nil && tk.kind() == probe {
			b.mu.Lock()
			if b.period == tk.gen() && BreakerState(b.state.Load()) == BreakerHalfOpen {
				b.probes-- // answered from memory: another call may probe
			}
			b.mu.Unlock()
		}
		return
	}
	if tk.kind() == pass {
		for {
			old := b.run.Load()
			gen, n := old>>runBits, old&runMax
			next := (gen + 1) << runBits // a success: a new generation, nothing counted
			if r == failed {
				if gen != tk.gen() {
					return // the store answered another call meanwhile
				}
				n = min(n+1, runMax)
				next = gen<<runBits | n
			}
			if b.run.CompareAndSwap(old, next) {
				if r == failed && int(n) >= b.cfg.Failures {
					b.trip(ctx, int(n), gen, err)
				}
				return
			}
		}
	}
	b.mu.Lock()
	var ev *BreakerEvent
	if b.period == tk.gen() && BreakerState(b.state.Load()) == BreakerHalfOpen {
		b.probes--
		now := b.e.now()
		switch r {
		case answered:
			// A new generation: the calls admitted before it opened, still
			// out, cannot count against it.
			b.run.Store((b.run.Load()>>runBits + 1) << runBits)
			b.state.Store(uint32(BreakerClosed))
			ev = &BreakerEvent{State: BreakerClosed, From: BreakerHalfOpen, Open: now.Sub(b.since), At: now}
		case failed:
			if b.tried++; b.tried >= b.cfg.Probes {
				b.until = now.Add(b.cfg.CoolDown)
				b.state.Store(uint32(BreakerOpen))
				ev = &BreakerEvent{State: BreakerOpen, From: BreakerHalfOpen, Err: err, At: now}
			}
		}
	}
	b.mu.Unlock()
	b.emit(ctx, ev)
}

// trip opens a closed breaker after n failures in a row.
func (b *breaker) trip(ctx context.Context, n int, gen uint64, err error) {
	b.mu.Lock()
	var ev *BreakerEvent
	// (Not if it opened and closed again since the count reached n.)
	if BreakerState(b.state.Load()) == BreakerClosed && b.run.Load()>>runBits == gen {
		now := b.e.now()
		b.since, b.until = now, now.Add(b.cfg.CoolDown)
		b.state.Store(uint32(BreakerOpen))
		ev = &BreakerEvent{State: BreakerOpen, From: BreakerClosed, Failures: n, Err: err, At: now}
	}
	b.mu.Unlock()
	b.emit(ctx, ev)
}

// emit logs a change and passes it to Config.ObserveBreaker.
func (b *breaker) emit(ctx context.Context, ev *BreakerEvent) {
	if ev == nil {
		return
	}
	ev.Store, ev.Policies, ev.Context = b.label, b.policies, ctx
	attrs := []slog.Attr{slog.String("store", b.label), slog.String("policies", strings.Join(b.policies, ",")),
		slog.String("from", ev.From.String())}
	level, msg := slog.LevelInfo, "edgelimit: store breaker "+ev.State.String()
	switch ev.State {
	case BreakerOpen:
		level = slog.LevelWarn
		if ev.Failures > 0 {
			attrs = append(attrs, slog.Int("failures", ev.Failures))
		}
		attrs = append(attrs, slog.Float64("cool_down_ms", float64(b.cfg.CoolDown.Microseconds())/1000))
		if ev.Err != nil {
			attrs = append(attrs, slog.String("error", ev.Err.Error()))
		}
	case BreakerClosed:
		attrs = append(attrs, slog.Float64("open_ms", float64(ev.Open.Microseconds())/1000))
	}
	b.e.log.LogAttrs(ctx, level, msg, attrs...)
	if b.e.observeBreaker != nil {
		b.e.observeBreaker(*ev)
	}
}

// State returns the breaker's state, for tests and operators.
func (b *breaker) State() BreakerState {
	if b == nil {
		return BreakerClosed
	}
	return BreakerState(b.state.Load())
}

// resultOf classifies a call that ended with err in cctx, whose parent is
// the request's context: the store answered when the limiter reached for
// it (started the budget's timer: a store call, or a wait for one) and
// succeeded; it failed when the limiter reached for it and failed while
// the request was still there, unless it only waited for another request's
// call (ErrWaited: that call counts). An error without reaching for the store
// (a request the limiter refused, a full in-process store) and a client
// that went away say nothing about the store.
func resultOf(cctx *budgetCtx, parent context.Context, err error) callResult {
	if !cctx.reached() {
		return neutral
	}
	switch {
	case err == nil:
		return answered
	case parent.Err() != nil, errors.Is(err, ErrWaited):
		return neutral
	}
	return failed
}

// breakers builds one breaker per store of the engine's policies: the
// policies whose limiters name one store (a BatchLimiter's BatchKey)
// share it; every other policy has its own. Policies sharing a store must
// configure its breaker alike.
func (e *Engine) breakers() error {
	type group struct {
		key string
		cs  []*compiled
	}
	var groups []*group
	byKey := map[string]*group{}
	perStrategy := map[string]int{}
	for _, c := range e.policies {
		key := ""
		if b, ok := ability[BatchLimiter](c.limiter); ok {
			key = b.BatchKey()
		}
		if key == "" {
			key = "policy\x00" + c.Name
		}
		g := byKey[key]
		if g == nil {
			g = &group{key: key}
			byKey[key] = g
			groups = append(groups, g)
			perStrategy[c.StrategyName()]++
		}
		g.cs = append(g.cs, c)
	}
	for _, g := range groups {
		first := g.cs[0]
		cfg := first.StoreBreaker
		for _, c := range g.cs[1:] {
			if !sameBreaker(c.StoreBreaker, cfg) {
				return fmt.Errorf("edgelimit: policies %q and %q share a store, but their store_breaker differ (%s and %s): set the same on both",
					first.Name, c.Name, cfg, c.StoreBreaker)
			}
		}
		if cfg.Off {
			continue
		}
		label := first.StrategyName()
		if strings.HasPrefix(g.key, "policy\x00") || perStrategy[label] > 1 {
			label += "/" + first.Name
		}
		b := &breaker{label: label, cfg: cfg.OrDefault(), e: e}
		for _, c := range g.cs {
			b.policies = append(b.policies, c.Name)
			c.breaker = b
		}
	}
	// The override store (Config.Overrides) is a store of its own, with the
	// breaker the first policy reading it configures.
	for _, c := range e.policies {
		if c.overrides == nil {
			continue
		}
		if e.overrideBreaker == nil && !c.StoreBreaker.Off {
			e.overrideBreaker = &breaker{label: "overrides", cfg: c.StoreBreaker.OrDefault(), e: e}
		}
		if e.overrideBreaker != nil {
			e.overrideBreaker.policies = append(e.overrideBreaker.policies, c.Name)
		}
	}
	return nil
}

func sameBreaker(a, b policy.Breaker) bool {
	if a.Off || b.Off {
		return a.Off == b.Off
	}
	return a.OrDefault() == b.OrDefault()
}
