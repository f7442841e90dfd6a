package policy

import (
	"fmt"
	"time"
)

// Policy is one rate-limit policy: the fields every strategy shares, and
// the strategy's own in Options. Parse fills every optional field
// with its default, so a loaded Policy is complete.
type Policy struct {
	Name   string
	Routes []Route
	// Key says where the client key comes from.
	Key KeySource
	// MissingKeyToIP: when a header or claim key is absent, key the
	// request by its source address (on_missing_key: ip) instead of
	// answering 400 (on_missing_key: reject, the default).
	MissingKeyToIP bool
	// Strategy decides the policy's requests; its Options are its own.
	Strategy *Strategy
	// Limit units per Window.
	Limit  int64
	Window time.Duration
	// Cost is the units every request on the policy spends; default 1.
	Cost int64
	// OnStoreError is what a failed (or too slow) store call means; the
	// strategy's default when the file sets none.
	OnStoreError OnStoreError
	// StoreTimeout is the policy's time budget for its store calls,
	// counted from the start of the request; default 100ms.
	StoreTimeout time.Duration
	// StoreBreaker is the circuit breaker of the policy's store, which
	// stops asking a store that keeps failing; DefaultBreaker when the
	// file sets none.
	StoreBreaker Breaker
	// Shadow decides and reports but never blocks, and is never shown.
	Shadow bool
	// TrustedProxies is how many proxy hops in front of the API append to
	// X-Forwarded-For and are trusted; 0 (default) ignores the header.
	TrustedProxies int
	// IPv6Prefix groups IPv6 clients by this prefix length; default 64.
	IPv6Prefix int
	// Tiers, if set, choose each request's quota from a key source (an
	// authorizer's plan claim, a header a trusted upstream sets).
	Tiers *Tiers
	// Overrides: consult the per-key limits an operator sets at run time
	// (Config.Overrides), through a cache at most OverrideStaleness old.
	Overrides bool
	// OverrideStaleness bounds how old a cached override may be; default
	// 60s.
	OverrideStaleness time.Duration
	// ChargeAfter: the policy settles after the response: a request
	// reserves Reserve units (or what the application set with
	// edgelimit.WithReservation) before the handler runs, and is admitted
	// only if they fit; after the response the engine settles with what the
	// handler reported (Verdict.ReportCost, Verdict.ReportCostFor), giving
	// back what it did not use or charging the excess, which takes the
	// quota below zero once.
	ChargeAfter bool
	// ChargeStatus, if set, are the only response statuses the policy
	// spends for (failed logins: 401, 403): a request reserves its Cost
	// before the handler runs, kept for these statuses and given back for
	// the others.
	ChargeStatus []int
	// RefundStatus are the response statuses after which the policy gives
	// back what the request spent (5xx: the service failed, not the client).
	RefundStatus []int
	// Reserve is what a request of a ChargeAfter policy reserves before the
	// handler runs, when the application set nothing; 0 means Cost.
	Reserve int64
	// Options are the strategy's own fields, as its Parse returned them
	// (for example *durablecounter.Options).
	Options any
	// Line is the policy's line in its file.
	Line int
	// Period, if set, makes the window a calendar period (window: month,
	// period_start, time_zone); Window is then its unit's nominal length.
	Period Period
	// MaxDelay, if set, is how long a request that does not fit now may
	// wait for its turn instead of being denied: its unit is reserved at
	// once and the engine holds the request until then (nginx's limit_req
	// with burst and without nodelay). Zero (the default) never waits.
	MaxDelay time.Duration
	// Ban, if set, bans a key the policy keeps denying, for longer on each
	// repeat (see Ban); nil: no ban.
	Ban *Ban
}

// Tiers choose a request's quota by a key source: each tier overrides some
// of the policy's limit, window and burst.
type Tiers struct {
	// By is where the tier's name comes from (header:NAME or claim:NAME).
	By KeySource
	// Default is the tier of a request without the key.
	Default string
	// RejectUnknown answers 400 to a request naming a tier the policy does
	// not have (on_unknown: reject); by default it gets the Default tier.
	RejectUnknown bool
	// Levels are the tiers by name; Names lists them in file order.
	Levels map[string]Limits
	Names  []string
}

// StrategyName returns the name of p's strategy, or "" when it has none.
func (p *Policy) StrategyName() string {
	if p.Strategy == nil {
		return ""
	}
	return p.Strategy.Name
}

// Limits is a quota: Limit units per Window, and for a bucket its Burst.
// A zero field means "as the policy says".
type Limits struct {
	Limit  int64
	Window time.Duration
	Burst  int64
	// Block makes the limit in force 0, whatever Limit says: every request
	// of the key is denied, as under a policy of limit: 0 (an operator's
	// `edgelimit override set --limit 0`). Window still sets the wait a
	// denial announces.
	Block bool
	// Period, if set, makes Window a calendar period (a tier's window:
	// month); Window is then its unit's nominal length, so a Limits with a
	// Period always has a Window and Or keeps the two together.
	Period Period
}

// IsZero reports whether l changes nothing.
func (l Limits) IsZero() bool { return l == Limits{} }

// Or returns l with its zero fields taken from base; a block in either
// stays a block.
func (l Limits) Or(base Limits) Limits {
	if l.Limit == 0 {
		l.Limit = base.Limit
	}
	if l.Window == 0 {
		l.Window, l.Period = base.Window, base.Period
	}
	if l.Burst == 0 {
		l.Burst = base.Burst
	}
	l.Block = l.Block || base.Block
	return l
}

// OnStoreError is what a policy does when its store fails or misses its
// time budget.
type OnStoreError uint8

const (
	// FailClosed answers 503 with Retry-After ("deny").
	FailClosed OnStoreError = iota
	// FailOpen lets the request through ("allow").
	FailOpen
	// FailLocal lets an in-process twin of the limiter decide ("local"), so
	// each instance still holds the limit on its own.
	FailLocal
)

// String returns the mode as a policy file writes it.
func (m OnStoreError) String() string {
	switch m {
	case FailClosed:
		return "deny"
	case FailOpen:
		return "allow"
	case FailLocal:
		return "local"
	}
	return fmt.Sprintf("OnStoreError(%d)", uint8(m))
}
