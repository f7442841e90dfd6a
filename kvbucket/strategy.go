package kvbucket

import (
	"strconv"
	"time"

	"github.com/edgelimit/edgelimit/internal/policyopts"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/powgate"
)

// Options are a kv policy's own fields. A Bucket takes them from
// Config.Options, else from the policy's Options (what the policy file
// said), else their zero values.
type Options struct {
	// Burst is the bucket's capacity; default (0) the limit.
	Burst int64
	// SyncInterval is how often a hot key's local state is written back
	// (and the KV read); default (0) DefaultSyncInterval.
	SyncInterval time.Duration
	// CacheSize bounds the keys whose state each process keeps for the
	// policy (policy field cache_size); default (0) Config.CacheSize, else
	// DefaultCacheSize.
	CacheSize int
	// ProofOfWork, if set, asks for a proof of work above a soft
	// threshold and denies only at the limit (proof_of_work: {above, bits,
	// ttl}; package powgate, which setup applies), as durable's does.
	ProofOfWork *powgate.Options
}

// ProofOfWorkOptions returns the policy's proof_of_work, for powgate:
// setup gates every policy for which powgate.OptionsOf reports options.
func (o *Options) ProofOfWorkOptions() *powgate.Options {
	if o == nil {
		return nil
	}
	return o.ProofOfWork
}

// String describes the options, as `edgelimit check` lists them.
func (o Options) String() string {
	s := "token-bucket"
	if o.Burst > 0 {
		s += " burst=" + strconv.FormatInt(o.Burst, 10)
	}
	if o.SyncInterval > 0 {
		s += " sync=" + o.SyncInterval.String()
	}
	if o.CacheSize > 0 {
		s += " cache=" + strconv.Itoa(o.CacheSize)
	}
	if o.ProofOfWork != nil {
		s += " " + o.ProofOfWork.String()
	}
	return s
}

// Strategy is the kv strategy, as policy files name it: strategy: kv, with
// the fields burst, sync_interval, cache_size and proof_of_work (and
// algorithm, which can only be token-bucket). It fails open by default: a soft limit lets requests
// through rather than lose them while its store is down. Importing the
// package registers it.
var Strategy = &policy.Strategy{
	Name:         "kv",
	Package:      "github.com/edgelimit/edgelimit/kvbucket",
	Fields:       []string{"algorithm", "burst", "sync_interval", "cache_size", powgate.Field},
	Parse:        parseOptions,
	OnStoreError: policy.FailOpen,
	Limits:       true,
	Delay:        true,
	Abilities: policy.CanRefund | policy.CanPeek | policy.CanCharge | policy.CanSettle | policy.CanLocal | policy.CanQuota |
		policy.CanReset | policy.CanGrant,
	Bans: true,
}

func init() { policy.Register(Strategy) }

// parseOptions reads a kv policy's own fields.
func parseOptions(f *policy.Fields) any {
	p := f.Policy()
	o := &Options{}
	if a, ok := f.String("algorithm"); ok && a != "token-bucket" {
		f.Errorf("algorithm", "strategy kv has one algorithm, token-bucket; %q is for strategy durable", a)
	}
	if b, ok := f.Int("burst"); ok {
		if b < 1 {
			f.Errorf("burst", "burst %d must be at least 1", b)
		}
		o.Burst = b
	}
	if d, ok := f.Duration("sync_interval"); ok {
		o.SyncInterval = d
	}
	if n, ok := f.Int("cache_size"); ok {
		if n < 1 || n > 1<<30 {
			f.Errorf("cache_size", "cache_size %d must be between 1 and %d", n, 1<<30)
		}
		o.CacheSize = int(n)
	}
	capacity, what := p.Limit, "limit"
	if o.Burst > 0 {
		capacity, what = o.Burst, "burst"
	}
	if p.Limit > 0 && p.Cost > capacity {
		f.Errorf("cost", "cost %d is more than the %s %d: every request would be denied", p.Cost, what, capacity)
	}
	o.ProofOfWork = powgate.Parse(f, powgate.Field, capacity)
	return o
}

// options returns the Options cfg asks for.
func options(cfg Config) (Options, error) {
	return policyopts.Of(cfg.Options, cfg.Policy, ErrConfig, "kvbucket")
}
