package inflight

import (
	"time"

	"github.com/edgelimit/edgelimit/internal/policyopts"
	"github.com/edgelimit/edgelimit/policy"
)

// DefaultRetryAfter is Options.RetryAfter's default.
const DefaultRetryAfter = time.Second

// MinLease is the shortest lease (the policy's window) a policy file may
// set: AWS Lambda's shortest function timeout. The lease must be no shorter
// than the timeout of the function the policy guards; see the package
// documentation.
const MinLease = time.Second

// MaxLimit is the largest limit of an in-flight policy: the DynamoDB item
// holds one attribute per holder (about 31 bytes each), and must stay well
// under DynamoDB's 400 KB.
const MaxLimit = 10_000

// Options are an in-flight policy's own fields. A Limiter takes them from
// Config.Options, else from the policy's Options (what the policy file
// said), else their zero values.
type Options struct {
	// RetryAfter is how long a denied client is told to wait (Retry-After,
	// and the effective window t of every decision), unless the earliest
	// lease of the key's holders ends sooner: a slot comes back whenever a
	// holder finishes, which no one can know in advance. Default (0)
	// DefaultRetryAfter; at most the lease.
	RetryAfter time.Duration
}

// String describes the options, as `edgelimit check` lists them.
func (o Options) String() string {
	r := o.RetryAfter
	if r == 0 {
		r = DefaultRetryAfter
	}
	return "in-flight retry_after=" + r.String()
}

// Strategy is the in-flight strategy, as policy files name it: strategy:
// inflight, where limit is how many slots the requests of one key may hold
// at once (cost of them each: 1 by default, how many requests run at
// once) and window is the lease (how long a slot is held at most if its holder
// never releases it), with the field retry_after. It fails closed by
// default: a concurrency limit protects something that cannot take more.
// Importing the package registers it.
var Strategy = &policy.Strategy{
	Name:         "inflight",
	Package:      "github.com/edgelimit/edgelimit/inflight",
	Fields:       []string{"retry_after"},
	Parse:        parseOptions,
	OnStoreError: policy.FailClosed,
	Limits:       true,
	Abilities:    policy.CanRefund | policy.CanPeek | policy.CanFinish | policy.CanQuota,
}

func init() { policy.Register(Strategy) }

// parseOptions reads an in-flight policy's own fields, and refuses the
// common ones that mean nothing for a concurrency limit.
func parseOptions(f *policy.Fields) any {
	p := f.Policy()
	o := &Options{}
	if p.Limit > 0 && p.Cost > p.Limit {
		f.Errorf("cost", "cost %d is more than the limit %d: no request of an in-flight policy could ever hold its %d slots", p.Cost, p.Limit, p.Cost)
	}
	if p.Limit > MaxLimit {
		f.Errorf("limit", "limit %d is more than %d requests in flight per key", p.Limit, MaxLimit)
	}
	if p.Window > 0 && p.Window < MinLease {
		f.Errorf("window", "window %s is the lease of a slot whose holder never releases it (an instance that died); it must be no shorter than the function's timeout, and at least %s", p.Window, MinLease)
	}
	if p.Window%time.Millisecond != 0 {
		f.Errorf("window", "window %s must be a whole number of milliseconds", p.Window)
	}
	if p.OnStoreError == policy.FailLocal {
		f.Errorf("on_store_error", "on_store_error local is not supported by strategy inflight: a slot taken from an in-process twin would never be released; use deny or allow")
	}
	switch {
	case p.ChargeAfter:
		f.Errorf("charge", "charge applies to quotas; an in-flight slot is taken before the handler and released after it, so nothing is left to charge (say how many slots a request holds with cost, or per request with edgelimit.WithReservation)")
	case len(p.ChargeStatus) > 0:
		f.Errorf("charge_status", "charge_status applies to quotas; an in-flight slot is taken before the handler and released after it, whatever the status")
	case len(p.RefundStatus) > 0:
		f.Errorf("refund_status", "refund_status means nothing for strategy inflight: its slot is released after every response")
	}
	if t := p.Tiers; t != nil {
		for _, name := range t.Names {
			l := t.Levels[name]
			if l.Limit > MaxLimit {
				f.Errorf("tiers", "tier %q: limit %d is more than %d requests in flight per key", name, l.Limit, MaxLimit)
			}
			if l.Limit > 0 && p.Cost > l.Limit {
				f.Errorf("tiers", "tier %q: limit %d is less than the cost %d: no request of the tier could ever hold its slots", name, l.Limit, p.Cost)
			}
			if l.Window != 0 && (l.Window < MinLease || l.Window%time.Millisecond != 0) {
				f.Errorf("tiers", "tier %q: window %s is a lease; it must be a whole number of milliseconds and at least %s", name, l.Window, MinLease)
			}
			if l.Burst != 0 {
				f.Errorf("tiers", "tier %q: burst means nothing for strategy inflight", name)
			}
		}
	}
	if d, ok := f.Duration("retry_after"); ok {
		switch {
		case d <= 0:
			f.Errorf("retry_after", "retry_after %s must be positive", d)
		case p.Window > 0 && d > p.Window:
			f.Errorf("retry_after", "retry_after %s is longer than the lease (window) %s, by which a slot is free anyway", d, p.Window)
		}
		o.RetryAfter = d
	}
	return o
}

// options returns the Options cfg asks for.
func options(cfg Config) (Options, error) {
	return policyopts.Of(cfg.Options, cfg.Policy, ErrConfig, "inflight")
}
