package edgelimit

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
	// Stateless: the strategy keeps no state in a store, so
	// on_store_error local (an in-process twin) means nothing for it.
	Stateless bool
}

var registry struct {
	sync.RWMutex
	byName map[string]*Strategy
}

// Register makes s known to the policy parser. Strategy packages call it
// from init; registering a name twice panics, as a programming error.
func Register(s *Strategy) {
	if s == nil || s.Name == "" || s.Parse == nil {
		panic("edgelimit: Register of a Strategy without Name or Parse")
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.byName == nil {
		registry.byName = map[string]*Strategy{}
	}
	if _, dup := registry.byName[s.Name]; dup {
		panic(fmt.Sprintf("edgelimit: strategy %q registered twice", s.Name))
	}
	registry.byName[s.Name] = s
}

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
