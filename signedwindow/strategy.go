package signedwindow

import (
	"strconv"
	"time"

	"github.com/edgelimit/edgelimit/internal/policyopts"
	"github.com/edgelimit/edgelimit/policy"
)

// ProofOfWork makes a fresh window cost work: the challenges of a signed
// policy.
type ProofOfWork struct {
	// Bits of leading zeros the proof's SHA-256 needs; 1 to 32, default 16.
	// Each bit doubles the client's expected work.
	Bits int
	// TTL is how long a challenge can be answered; default 10s, at most 10m.
	TTL time.Duration
}

// Options are a signed policy's own fields. A Limiter takes them from
// Config.Options, else from the policy's Options (what the policy file
// said), else their zero values: no proof of work.
type Options struct {
	// ProofOfWork, if set, makes a fresh window cost a proof.
	ProofOfWork *ProofOfWork
}

// String describes the options, as `edgelimit check` lists them.
func (o Options) String() string {
	if o.ProofOfWork == nil {
		return "window token"
	}
	return "window token, proof of work " + strconv.Itoa(o.ProofOfWork.Bits) + " bits/" + o.ProofOfWork.TTL.String()
}

// Strategy is the signed strategy, as policy files name it: strategy:
// signed, with the field proof_of_work ({bits, ttl}). It keeps no state on
// the server, so it has no store to fail (on_store_error local means
// nothing for it). Importing the package registers it.
var Strategy = &policy.Strategy{
	Name:         "signed",
	Package:      "github.com/edgelimit/edgelimit/signedwindow",
	Fields:       []string{"algorithm", "proof_of_work"},
	Parse:        parseOptions,
	OnStoreError: policy.FailOpen,
	Abilities:    policy.CanRefund | policy.CanPeek,
}

func init() { policy.Register(Strategy) }

// parseOptions reads a signed policy's own fields.
func parseOptions(f *policy.Fields) any {
	o := &Options{}
	if f.Has("algorithm") {
		if a, ok := f.String("algorithm"); ok && a != "fixed-window" {
			f.Errorf("algorithm", "strategy signed counts in fixed windows; remove algorithm %q", a)
		}
	}
	if m, ok := f.Map("proof_of_work", "bits", "ttl"); ok {
		pw := &ProofOfWork{Bits: 16, TTL: 10 * time.Second}
		if b, ok := m.Int("bits"); ok {
			if b < 1 || b > 32 {
				m.Errorf("bits", "proof_of_work.bits %d must be between 1 and 32 (each bit doubles the client's work)", b)
			}
			pw.Bits = int(b)
		}
		if d, ok := m.Duration("ttl"); ok {
			if d > 10*time.Minute {
				m.Errorf("ttl", "proof_of_work.ttl %s is longer than 10m", d)
			}
			pw.TTL = d
		}
		o.ProofOfWork = pw
	}
	if p := f.Policy(); p.Limit > 0 && p.Cost > p.Limit {
		f.Errorf("cost", "cost %d is more than the limit %d: every request would be denied", p.Cost, p.Limit)
	}
	return o
}

// options returns the Options cfg asks for.
func options(cfg Config) (Options, error) {
	return policyopts.Of(cfg.Options, cfg.Policy, nil, "signedwindow")
}
