package powgate

import (
	"strconv"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
)

// Options say when a gated policy asks for work, and how much: the policy
// file's proof_of_work: {above: 80, bits: 16, ttl: 10s} on a durable or kv
// policy.
type Options struct {
	// Above is the soft threshold, in units of the quota in force: a
	// request that would leave more than Above units used (the limit less
	// what remains after it) needs a proof. 0 asks every request for one.
	// Ignored when AbovePercent is set.
	Above int64
	// AbovePercent, when not zero, sets the threshold as a share of the
	// quota in force instead (the decision's Limit: a tier's or an
	// override's as much as the policy's), 1 to 99: above: 80% on a limit
	// of 100 is Above 80, on a tier of 1000 it is 800. Rounded down.
	AbovePercent int
	// Bits is the difficulty of the challenges, 1 to pow.MaxBits; default
	// pow.DefaultBits (16). Each bit doubles the client's expected work.
	Bits int
	// TTL is how long a challenge can be answered (and so how long a
	// proof can be replayed on other instances); default pow.DefaultTTL
	// (10s), at most pow.MaxTTL (10m).
	TTL time.Duration
}

// threshold returns the units that may be used, after a request, without
// a proof, for a quota of limit units.
func (o Options) threshold(limit int64) int64 {
	if o.AbovePercent == 0 {
		return o.Above
	}
	p := int64(o.AbovePercent)
	return limit/100*p + limit%100*p/100 // no overflow for any limit
}

// String describes the options, as `edgelimit check` lists them: "proof of
// work above 80 (16 bits, 10s)".
func (o Options) String() string {
	above := strconv.FormatInt(o.Above, 10)
	if o.AbovePercent != 0 {
		above = strconv.Itoa(o.AbovePercent) + "%"
	}
	bits, ttl := o.Bits, o.TTL
	if bits == 0 {
		bits = pow.DefaultBits
	}
	if ttl == 0 {
		ttl = pow.DefaultTTL
	}
	return "proof of work above " + above + " (" + strconv.Itoa(bits) + " bits, " + ttl.String() + ")"
}

// Field is the policy field Parse reads, as strategies declare it.
const Field = "proof_of_work"

// Parse reads a durable or kv policy's nested field name (Field, in the
// policy files) into Options: {above: 80, bits: 16, ttl: 10s}, where above
// is required, a whole number of units or a percentage ("80%"). capacity
// is what the strategy's decisions announce as the quota (the limit, or a
// bucket's burst): an absolute above must be below it, since at the hard
// limit a proof buys nothing. It returns nil when the field is absent, and
// reports every problem at its line with f.Errorf.
//
// A policy that charges after the response (charge, charge_status) can be
// gated: its request reserves before the handler runs with Allow, which
// the Gate decides as any other, so a proof buys the reservation; the
// settlement after the response is the inner limiter's.
func Parse(f *policy.Fields, name string, capacity int64) *Options {
	m, ok := f.Map(name, "above", "bits", "ttl")
	if !ok {
		return nil
	}
	o := &Options{Bits: pow.DefaultBits, TTL: pow.DefaultTTL}
	p := f.Policy()
	if s, ok := m.String("above"); ok {
		parseAbove(m, name, s, capacity, p.Tiers != nil || p.Overrides, o)
	} else if !m.Has("above") {
		m.Errorf("above", "%s needs above: the units used in the window beyond which a request needs a proof, "+
			"like above: 80 or above: 80%%", name)
	}
	if b, ok := m.Int("bits"); ok {
		if b < 1 || b > pow.MaxBits {
			m.Errorf("bits", "%s.bits %d must be between 1 and %d (each bit doubles the client's work)", name, b, pow.MaxBits)
		}
		o.Bits = int(b)
	}
	if d, ok := m.Duration("ttl"); ok {
		switch {
		case d > pow.MaxTTL:
			m.Errorf("ttl", "%s.ttl %s is longer than %s (a proof can be replayed on another instance for that long)", name, d, pow.MaxTTL)
		case d < time.Millisecond:
			m.Errorf("ttl", "%s.ttl %s is shorter than 1ms", name, d)
		}
		o.TTL = d
	}
	return o
}

// parseAbove reads above: "80" (units) or "80%" into o. With tiers or
// overrides the quota changes per request, so an absolute threshold is
// checked against the policy's own capacity only when there are neither.
func parseAbove(m *policy.Fields, name, s string, capacity int64, varies bool, o *Options) {
	s = strings.TrimSpace(s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(pct))
		if err != nil || n < 1 || n > 99 {
			m.Errorf("above", "%s.above %q must be a whole percentage from 1%% to 99%% of the limit (or a number of units)", name, s)
			return
		}
		o.AbovePercent = n
		return
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		m.Errorf("above", "%s.above %q must be a whole number of units, like 80, or a percentage, like 80%%", name, s)
	case n < 0:
		m.Errorf("above", "%s.above %d must not be negative (0 asks every request for a proof)", name, n)
	case capacity > 0 && n >= capacity && !varies:
		m.Errorf("above", "%s.above %d must be less than the quota of %d units (the limit, or the burst): at the hard limit a proof buys nothing", name, n, capacity)
	default:
		o.Above = n
	}
}

// Gated is implemented by a strategy's options that can carry
// proof_of_work (durable's and kv's), so that a program can find the
// policies to gate without knowing their strategies.
type Gated interface {
	// ProofOfWorkOptions returns the policy's proof_of_work, or nil.
	ProofOfWorkOptions() *Options
}

// ProofOfWorkOptions returns o: Options are Gated themselves, for a
// strategy whose options are nothing else.
func (o *Options) ProofOfWorkOptions() *Options { return o }

// OptionsOf returns the proof_of_work of p (its Options, when they are
// Gated), or nil when p has none.
func OptionsOf(p *policy.Policy) *Options {
	if g, ok := p.Options.(Gated); ok {
		return g.ProofOfWorkOptions()
	}
	return nil
}
