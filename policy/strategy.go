package policy

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Strategy describes one strategy to the policy parser: its name, the
// policy fields it owns and how it reads them. The root package parses the
// fields every policy has (name, routes, key, limit, window, cost, the
// failure mode, shadow) and hands the rest to the policy's strategy, so
// that a strategy's options are declared, validated and documented in its
// own package, and adding a strategy touches only that package and the
// program that links it.
//
// A strategy package registers its Strategy in an init function. A program
// parses the policies of the strategies it links: a policy file naming one
// that is not is refused with a message saying which package to import.
// That is how a binary links only what it uses.
type Strategy struct {
	// Name is what a policy's strategy field says ("durable").
	Name string
	// Package is the import path that registers it, for messages.
	Package string
	// Fields are the policy fields the strategy reads beyond the common
	// ones; any other field is refused, with a hint when another strategy
	// owns it.
	Fields []string
	// Parse reads the strategy's own fields of one policy (f.Policy() has
	// the common ones) and returns what Policy.Options holds. It reports
	// problems with f.Errorf; nil means the options' defaults.
	Parse func(f *Fields) any
	// OnStoreError is the policy's failure mode when the file sets none.
	OnStoreError OnStoreError
	// Abilities are the optional abilities of the strategy's limiters
	// beyond deciding: the parser refuses, at the field's line, a policy
	// whose fields need one the strategy lacks, and a test checks that
	// every registered strategy's limiters have exactly these.
	Abilities Abilities
	// Limits: the strategy's limiters honour Request.Limits, so its
	// policies may have tiers and overrides. A policy file giving either to
	// a strategy without it is refused rather than silently ignored.
	Limits bool
	// Calendar: the strategy counts calendar periods (window: month); a
	// policy file giving one to a strategy without it is refused.
	Calendar bool
	// Delay: the strategy's limiters can admit a request for a later turn
	// (edgelimit.Decision.Delay), so its policies may have max_delay. Its
	// Parse refuses max_delay where only some of its policies can (an
	// algorithm).
	Delay bool
	// Bans: the strategy's policies may have a ban (Policy.Ban), whose
	// denial counts the engine keeps in the store of the strategy's
	// backend; a ban on another strategy is refused.
	Bans bool
}

// Abilities is a set of a limiter's optional abilities, each an interface
// of package edgelimit that the limiter implements (a Strategy declares
// them; the engine finds them by type assertion).
type Abilities uint16

// The abilities, each named for the interface of package edgelimit it
// stands for.
const (
	// CanRefund: edgelimit.Refunder, give back what a decision spent
	// (refund_status; another policy of the route denied).
	CanRefund Abilities = 1 << iota
	// CanPeek: edgelimit.Peeker, answer without spending.
	CanPeek
	// CanCharge: edgelimit.Charger, spend whether or not it fits (what
	// Settler does with an excess).
	CanCharge
	// CanFinish: edgelimit.Finisher, hear how an admitted request ended.
	CanFinish
	// CanBatch: edgelimit.BatchLimiter, decide several policies atomically.
	CanBatch
	// CanLocal: edgelimit.Localizer, an in-process twin for on_store_error
	// local; a strategy without it keeps no state in a store.
	CanLocal
	// CanQuota: edgelimit.Quoter, announce a quota other than the policy's
	// limit and window.
	CanQuota
	// CanReset: edgelimit.Resetter, an operator's reset of one key.
	CanReset
	// CanGrant: edgelimit.Granter, an operator's grant to one key.
	CanGrant
	// CanSettle: edgelimit.Settler, settle a reservation after the
	// response (charge: response, charge_status).
	CanSettle
)

// abilityNames are the interfaces' names, in the order of the bits.
var abilityNames = []string{"Refunder", "Peeker", "Charger", "Finisher", "BatchLimiter", "Localizer", "Quoter", "Resetter", "Granter", "Settler"}

// Has reports whether a holds every ability of b.
func (a Abilities) Has(b Abilities) bool { return a&b == b }

// String lists the abilities by their interfaces' names, like
// "Refunder|Peeker".
func (a Abilities) String() string {
	var names []string
	for i, n := range abilityNames {
		if a&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

var registry struct {
	sync.RWMutex
	byName map[string]*Strategy
}

// Register makes s known to the policy parser. Strategy packages call it
// from init; registering a name twice panics, as a programming error.
func Register(s *Strategy) {
	if s == nil || s.Name == "" || s.Parse == nil {
		panic("policy: Register of a Strategy without Name or Parse")
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.byName == nil {
		registry.byName = map[string]*Strategy{}
	}
	if _, dup := registry.byName[s.Name]; dup {
		panic(fmt.Sprintf("policy: strategy %q registered twice", s.Name))
	}
	registry.byName[s.Name] = s
}

// Strategies returns the registered strategies, by name.
func Strategies() []*Strategy { return strategies() }

// lookupStrategy returns the registered strategy named name, or nil.
func lookupStrategy(name string) *Strategy {
	registry.RLock()
	defer registry.RUnlock()
	return registry.byName[name]
}

// strategies returns the registered strategies by name.
func strategies() []*Strategy {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]*Strategy, 0, len(registry.byName))
	for _, s := range registry.byName {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Strategy) int { return strings.Compare(a.Name, b.Name) })
	return out
}
