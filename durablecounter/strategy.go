package durablecounter

import (
	"strconv"
	"strings"

	"github.com/edgelimit/edgelimit/internal/policyopts"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/powgate"
)

// Algorithm is a durable policy's counting algorithm (the policy file's
// algorithm field).
type Algorithm string

// The algorithms; see the package documentation for each one's rule.
const (
	FixedWindow   Algorithm = "fixed-window"
	SlidingWindow Algorithm = "sliding-window"
	SlidingLog    Algorithm = "sliding-log"
	GCRA          Algorithm = "gcra"
)

// Algorithms lists every algorithm, in the order the documentation gives
// them.
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, SlidingLog, GCRA}

// Valid reports whether a is one of Algorithms.
func (a Algorithm) Valid() bool {
	for _, b := range Algorithms {
		if a == b {
			return true
		}
	}
	return false
}

// Options are a durable policy's own fields. A Counter takes them from
// Config.Options, else from the policy's Options (what the policy file
// said), else their zero values: fixed window, no shards, no deny cache.
type Options struct {
	// Algorithm is how the Counter counts; default FixedWindow.
	Algorithm Algorithm
	// Burst is gcra's bucket capacity; default (0) the limit. The other
	// algorithms have none.
	Burst int64
	// Shards spreads one hot key (a global policy) over that many items;
	// default 1.
	Shards int
	// DenyCache answers repeat denials from this instance's memory until
	// they could fit, without a store call. The policy file's default is
	// on (deny_cache: true); a zero Options has it off.
	DenyCache bool
	// ProofOfWork, if set, asks for a proof of work above a soft
	// threshold and denies only at the limit (proof_of_work: {above, bits,
	// ttl}; package powgate, which setup applies).
	ProofOfWork *powgate.Options
}

// ProofOfWorkOptions returns the policy's proof_of_work, for powgate.
func (o *Options) ProofOfWorkOptions() *powgate.Options {
	if o == nil {
		return nil
	}
	return o.ProofOfWork
}

// String describes the options, as `edgelimit check` lists them.
func (o Options) String() string {
	alg := o.Algorithm
	if alg == "" {
		alg = FixedWindow
	}
	parts := []string{string(alg)}
	if alg == GCRA && o.Burst > 0 {
		parts = append(parts, "burst="+strconv.FormatInt(o.Burst, 10))
	}
	if o.Shards > 1 {
		parts = append(parts, "shards="+strconv.Itoa(o.Shards))
	}
	if !o.DenyCache {
		parts = append(parts, "no deny cache")
	}
	if o.ProofOfWork != nil {
		parts = append(parts, o.ProofOfWork.String())
	}
	return strings.Join(parts, " ")
}

// Strategy is the durable strategy, as policy files name it: strategy:
// durable, with the fields algorithm, burst, shards and deny_cache. It
// fails closed by default: an exact quota must not be over-spent when its
// store is down. Importing the package registers it.
var Strategy = &policy.Strategy{
	Name:         "durable",
	Package:      "github.com/edgelimit/edgelimit/durablecounter",
	Fields:       []string{"algorithm", "burst", "shards", "deny_cache", powgate.Field},
	Parse:        parseOptions,
	OnStoreError: policy.FailClosed,
	Limits:       true,
	Calendar:     true,
	Delay:        true,
	Abilities: policy.CanRefund | policy.CanPeek | policy.CanCharge | policy.CanSettle | policy.CanBatch | policy.CanLocal |
		policy.CanQuota | policy.CanReset | policy.CanGrant,
	Bans: true,
}

func init() { policy.Register(Strategy) }

// parseOptions reads a durable policy's own fields.
func parseOptions(f *policy.Fields) any {
	p := f.Policy()
	o := &Options{Algorithm: FixedWindow, Shards: 1, DenyCache: true}
	names := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		names[i] = string(a)
	}
	if a, ok := f.OneOf("algorithm", names...); ok {
		o.Algorithm = Algorithm(a)
	}
	if b, ok := f.Int("burst"); ok {
		switch {
		case b < 1:
			f.Errorf("burst", "burst %d must be at least 1", b)
		case o.Algorithm != GCRA:
			f.Errorf("burst", "burst applies only to algorithm gcra and strategy kv")
		}
		o.Burst = b
	}
	if o.Algorithm == GCRA && o.Burst == 0 {
		o.Burst = p.Limit
	}
	if b, ok := f.Bool("deny_cache"); ok {
		o.DenyCache = b
	}
	if s, ok := f.Int("shards"); ok {
		switch {
		case s < 1 || s > MaxShards:
			f.Errorf("shards", "shards %d must be between 1 and %d", s, MaxShards)
		case s > 1 && p.Limit > 0 && s > p.Limit:
			f.Errorf("shards", "shards %d is more than the limit %d; each shard needs at least one unit", s, p.Limit)
		}
		o.Shards = int(s)
	}
	capacity, what := p.Limit, "limit"
	if o.Algorithm == GCRA {
		capacity, what = o.Burst, "burst"
	}
	if p.Limit > 0 && p.Cost > capacity {
		f.Errorf("cost", "cost %d is more than the %s %d: every request would be denied", p.Cost, what, capacity)
	}
	o.ProofOfWork = powgate.Parse(f, powgate.Field, capacity)
	parsePeriods(f, o)
	parseMaxDelay(f, o)
	return o
}

// options returns the Options cfg asks for.
func options(cfg Config) (Options, error) {
	return policyopts.Of(cfg.Options, cfg.Policy, ErrConfig, "durablecounter")
}
