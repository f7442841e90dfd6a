package kvbucket

import (
	"fmt"
	"strconv"
	"time"

	"github.com/edgelimit/edgelimit"
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
	return s
}

// Strategy is the kv strategy, as policy files name it: strategy: kv, with
// the fields burst and sync_interval (and algorithm, which can only be
// token-bucket). It fails open by default: a soft limit lets requests
// through rather than lose them while its store is down. Importing the
// package registers it.
var Strategy = &edgelimit.Strategy{
	Name:         "kv",
	Package:      "github.com/edgelimit/edgelimit/kvbucket",
	Fields:       []string{"algorithm", "burst", "sync_interval"},
	Parse:        parseOptions,
	OnStoreError: edgelimit.FailOpen,
}

func init() { edgelimit.Register(Strategy) }

// parseOptions reads a kv policy's own fields.
func parseOptions(f *edgelimit.Fields) any {
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
	capacity, what := p.Limit, "limit"
	if o.Burst > 0 {
		capacity, what = o.Burst, "burst"
	}
	if p.Limit > 0 && p.Cost > capacity {
		f.Errorf("cost", "cost %d is more than the %s %d: every request would be denied", p.Cost, what, capacity)
	}
	return o
}

// options returns the Options cfg asks for.
func options(cfg Config) (Options, error) {
	switch {
	case cfg.Options != nil:
		return *cfg.Options, nil
	case cfg.Policy.Options == nil:
		return Options{}, nil
	}
	o, ok := cfg.Policy.Options.(*Options)
	if !ok {
		return Options{}, fmt.Errorf("%w: policy %q: options are a %T, not *kvbucket.Options (is it a kv policy?)", ErrBadConfig, cfg.Policy.Name, cfg.Policy.Options)
	}
	return *o, nil
}
