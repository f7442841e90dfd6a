package durablecounter

import "fmt"

// Code is a part of the package that a program links into its Counters
// with NewLinked: an algorithm's rule and DynamoDB encoding
// (FixedWindowCode, SlidingWindowCode, SlidingLogCode, GCRACode), or the
// Memory store (MemoryCode). New links every one; a program that builds
// its Counters only with NewLinked links only the Code it names, which is
// how the example Lambda functions leave out the algorithms (and, but for
// search, the Memory store) their policy files do not use.
type Code struct {
	alg   Algorithm
	build func(params) algorithm
	// memory returns a new Memory store (Local's), shared the one of every
	// Config without a Store.
	memory, shared func() Store
}

// The Code of each algorithm, and of the Memory store.
var (
	FixedWindowCode   = Code{alg: FixedWindow, build: newFixedWindow}
	SlidingWindowCode = Code{alg: SlidingWindow, build: newSlidingWindow}
	SlidingLogCode    = Code{alg: SlidingLog, build: newSlidingLog}
	GCRACode          = Code{alg: GCRA, build: newGCRA}
	// MemoryCode is the Memory store: what Counter.Local keeps its twin's
	// state in (on_store_error: local), and the Store of a Config without
	// one. Without it, Local and a Config without a Store are errors.
	MemoryCode = Code{memory: newTwinMemory, shared: defaultStore}
)

func newTwinMemory() Store { return NewMemory(MemoryConfig{}) }

// NewLinked is New for a program that links only the given Code: a policy
// whose algorithm is not among it is refused with ErrUnsupportedAlgorithm
// naming the algorithm; without MemoryCode, a Config without a Store is
// ErrConfig, and so is Local (the engine then refuses a policy with
// on_store_error: local at start-up). New(cfg) is NewLinked(cfg) with
// every Code.
func NewLinked(cfg Config, code ...Code) (*Counter, error) {
	var l linked
	for _, k := range code {
		if k.memory != nil {
			l.memory, l.shared = k.memory, k.shared
		}
		if k.build != nil {
			l.algs = append(l.algs, k)
		}
	}
	return newCounter(cfg, l)
}

// linked is the Code a Counter was built with: its algorithms (or lookup,
// New's, which finds every one), and the Memory store's constructor (nil
// when not linked).
type linked struct {
	algs           []Code
	lookup         func(Algorithm) (Code, bool)
	memory, shared func() Store
}

// all is every Code, New's.
func all() linked { return linked{lookup: algorithmCode, memory: newTwinMemory, shared: defaultStore} }

// code returns alg's Code among l's.
func (l linked) code(alg Algorithm) (Code, bool) {
	if l.lookup != nil {
		return l.lookup(alg)
	}
	for _, k := range l.algs {
		if k.alg == alg {
			return k, true
		}
	}
	return Code{}, false
}

// notLinked is the refusal of an algorithm the program did not link.
func notLinked(name string, alg Algorithm) error {
	if !alg.Valid() {
		return fmt.Errorf("%w: policy %q: unknown algorithm %q", ErrUnsupportedAlgorithm, name, alg)
	}
	return fmt.Errorf("%w: policy %q: algorithm %s is not linked into this program (it builds its durable counters with durablecounter.NewLinked without %sCode)",
		ErrUnsupportedAlgorithm, name, alg, codeName(alg))
}

// codeName is the Go name of alg's Code, less "Code".
func codeName(alg Algorithm) string {
	switch alg {
	case FixedWindow:
		return "FixedWindow"
	case SlidingWindow:
		return "SlidingWindow"
	case SlidingLog:
		return "SlidingLog"
	}
	return "GCRA"
}
