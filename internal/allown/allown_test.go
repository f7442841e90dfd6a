// Package allown is a strategy that exists only in tests, to prove
// CONTRIBUTING.md's checklist for adding a strategy by following it:
// `strategy: allown` admits the first limit units of each key in each
// window, then denies until the window ends (a fixed window, kept in
// memory), and adds the policy's detail to its denials' problem bodies.
// Each step of the checklist is marked where it is done; the steps that do
// not apply to a package only tests compile say why.
package allown

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/policyopts"
	"github.com/edgelimit/edgelimit/policy"
)

// --- Step 1: its options and its registration ------------------------------

// Options are an allown policy's own fields.
type Options struct {
	// Detail is a sentence a denial's problem body adds (the policy field
	// detail); default none.
	Detail string
}

// String describes the options, as `edgelimit check` lists them.
func (o Options) String() string { return "allown detail=" + strconv.Quote(o.Detail) }

// MaxDetail bounds the detail field.
const MaxDetail = 200

// Strategy is the allown strategy, as policy files name it.
var Strategy = &policy.Strategy{
	Name:         "allown",
	Package:      "github.com/edgelimit/edgelimit/internal/allown",
	Fields:       []string{"detail"},
	Parse:        parseOptions,
	OnStoreError: policy.FailClosed,
	Limits:       true,
	Abilities:    policy.CanRefund | policy.CanPeek,
}

func init() { policy.Register(Strategy) }

func parseOptions(f *policy.Fields) any {
	o := &Options{}
	if d, ok := f.String("detail"); ok {
		switch {
		case len(d) > MaxDetail:
			f.Errorf("detail", "detail is %d bytes, more than %d", len(d), MaxDetail)
		case !printable(d):
			f.Errorf("detail", "detail must be printable text on one line")
		}
		o.Detail = d
	}
	return o
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// --- Step 2: its limiter ---------------------------------------------------

// ErrConfig is wrapped by every error of New for an invalid configuration.
var ErrConfig = errors.New("allown: invalid config")

// Config configures a Limiter.
type Config struct {
	// Policy is the policy to enforce. Required.
	Policy *policy.Policy
	// Options, if set, are the Limiter's own; default the Policy's.
	Options *Options
	// Store keeps the counts; default a Memory of the Limiter's own.
	Store Store
	// Now is the Limiter's clock; default the Request's At, else time.Now.
	Now func() time.Time
}

// Limiter admits the first limit units of each key in each window.
type Limiter struct {
	name   string
	prefix string
	limit  int64
	window time.Duration
	detail string
	store  Store
	now    func() time.Time
}

// --- Step 3: its abilities -------------------------------------------------

var (
	_ edgelimit.Limiter  = (*Limiter)(nil)
	_ edgelimit.Refunder = (*Limiter)(nil)
	_ edgelimit.Peeker   = (*Limiter)(nil)
)

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	p := cfg.Policy
	switch {
	case p == nil:
		return nil, fmt.Errorf("%w: Policy is required", ErrConfig)
	case p.Strategy != nil && p.Strategy != Strategy:
		return nil, fmt.Errorf("%w: policy %q: strategy %q is not %s", ErrConfig, p.Name, p.Strategy.Name, Strategy.Name)
	case p.Limit < 0 || p.Window <= 0:
		return nil, fmt.Errorf("%w: policy %q: limit %d and window %s", ErrConfig, p.Name, p.Limit, p.Window)
	}
	opts, err := policyopts.Of(cfg.Options, p, ErrConfig, "allown")
	if err != nil {
		return nil, err
	}
	l := &Limiter{name: p.Name, prefix: p.Name + "#", limit: p.Limit, window: p.Window, detail: opts.Detail,
		store: cfg.Store, now: cfg.Now}
	if l.store == nil {
		l.store = NewMemory(MemoryConfig{})
	}
	return l, nil
}

// limits returns the limit and window in force for req: a tier's or an
// override's, else the policy's.
func (l *Limiter) limits(req edgelimit.Request) (int64, time.Duration) {
	limit, window := l.limit, l.window
	if req.Limits.Limit > 0 {
		limit = req.Limits.Limit
	}
	if req.Limits.Window > 0 {
		window = req.Limits.Window
	}
	return limit, window
}

func (l *Limiter) at(req edgelimit.Request) time.Time {
	switch {
	case l.now != nil:
		return l.now()
	case !req.At.IsZero():
		return req.At
	}
	return time.Now()
}

// windowStart is the start of the window of t, aligned to the Unix epoch.
func windowStart(t time.Time, w time.Duration) int64 {
	n, wn := t.UnixNano(), int64(w)
	q := n / wn
	if n%wn < 0 {
		q--
	}
	return q * wn
}

// Allow admits req if its cost fits what is left of its key's window.
func (l *Limiter) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	return l.decide(ctx, req, false)
}

// Peek tells what Allow would answer, spending nothing.
func (l *Limiter) Peek(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	return l.decide(ctx, req, true)
}

func (l *Limiter) decide(ctx context.Context, req edgelimit.Request, peek bool) (edgelimit.Decision, error) {
	if err := ctx.Err(); err != nil {
		return edgelimit.Decision{}, err
	}
	limit, win := l.limits(req)
	now := l.at(req)
	start := windowStart(now, win)
	cost := req.Units()
	used, fits, err := l.store.add(l.prefix+req.Key, window{start, start + int64(win)}, now.UnixNano(), cost, limit, peek)
	if err != nil {
		return edgelimit.Decision{}, fmt.Errorf("allown: policy %q: %w", l.name, err)
	}
	d := edgelimit.Decision{Allowed: fits, Policy: l.name, Limit: limit, Window: win,
		Reset: time.Duration(start + int64(win) - now.UnixNano())}
	switch {
	case fits && peek:
		d.Remaining = limit - used
	case fits:
		d.Remaining = limit - used - cost
		d.Receipt = edgelimit.Receipt{At: now.UnixNano(), Slot: start}
	default:
		d.Remaining = min(max(limit-used, 0), cost-1)
		d.RetryAfter = d.Reset
		if l.detail != "" {
			d.Response = &edgelimit.Response{Detail: l.detail}
		}
	}
	return d, nil
}

// Refund gives back what d spent, to d's window while it lasts.
func (l *Limiter) Refund(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	if !d.Allowed || d.Receipt.At == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_, win := l.limits(req)
	w := window{d.Receipt.Slot, d.Receipt.Slot + int64(win)}
	if l.at(req).UnixNano() >= w.end {
		return nil // that window has ended: nothing to give back to
	}
	l.store.give(l.prefix+req.Key, w, req.Units())
	return nil
}

// --- Step 4: its store -----------------------------------------------------

// Store keeps the counts of Limiters: a *Memory. It is sealed (unexported
// methods), as every strategy's store is. (The checklist's internal/wire
// package is for stores outside the strategy's package; this one has
// none.)
type Store interface {
	// add counts cost against item's window w, at the instant now (Unix
	// nanoseconds), if used+cost fits limit (and it is not a peek), and
	// reports what was used before.
	add(item string, w window, now, cost, limit int64, peek bool) (used int64, fits bool, err error)
	// give takes cost back from item's window w, never below zero.
	give(item string, w window, cost int64)
}

// MemoryConfig configures a Memory store. The zero value is ready to use.
type MemoryConfig struct {
	// MaxKeys bounds the keys held; default (0 or less) 1,048,576. A new key
	// beyond it is refused once the keys whose window has ended are swept.
	MaxKeys int
}

// ErrStoreFull is returned by a Memory store that holds MaxKeys keys in
// their windows.
var ErrStoreFull = errors.New("allown: memory store full")

// Memory is an in-process Store.
type Memory struct {
	mu  sync.Mutex
	m   map[string]count
	max int
}

// window is a window's start and end, Unix nanoseconds.
type window struct{ start, end int64 }

type count struct {
	w window
	n int64
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory store.
func NewMemory(cfg MemoryConfig) *Memory {
	m := &Memory{m: map[string]count{}, max: cfg.MaxKeys}
	if m.max <= 0 {
		m.max = 1 << 20
	}
	return m
}

func (m *Memory) add(item string, w window, now, cost, limit int64, peek bool) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.m[item]
	if !ok || c.w != w {
		c = count{w: w}
	}
	fits := c.n+cost <= limit
	if !fits || peek {
		return c.n, fits, nil
	}
	if !ok && len(m.m) >= m.max {
		for k, v := range m.m {
			if v.w.end <= now {
				delete(m.m, k)
			}
		}
		if len(m.m) >= m.max {
			return c.n, false, ErrStoreFull
		}
	}
	used := c.n
	c.n += cost
	m.m[item] = c
	return used, true, nil
}

func (m *Memory) give(item string, w window, cost int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.m[item]; ok && c.w == w && c.n >= cost {
		c.n -= cost
		m.m[item] = c
	}
}
