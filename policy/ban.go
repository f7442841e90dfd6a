package policy

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Ban is a policy's escalating ban (the ban field): once the policy has
// denied a key After times within Within, every request of the key is
// refused for For, then For × Growth, × Growth², … on each ban of a run,
// at most Max; a run ends, and the next ban lasts For again, once Decay
// has passed since the last ban ended without another. The engine keeps
// bans in a store every instance shares (edgelimit.Config.Bans) and
// checks them before the limiters.
type Ban struct {
	// After is how many denials ban the key; required, at least 1.
	After int64
	// Within is the period the denials must fall in, counted from the
	// first of them; default the policy's window.
	Within time.Duration
	// For is how long a run's first ban lasts; required.
	For time.Duration
	// Growth multiplies each next ban of a run; default 2, at least 1.
	Growth float64
	// Max caps a ban's length; default 24h, or For if that is longer.
	Max time.Duration
	// Decay is the quiet time after a ban's end that ends the run; default
	// 24h.
	Decay time.Duration
	// Staleness bounds how old an instance's knowledge of a key's ban (or
	// of its having none) may be: each instance reads a key's ban at most
	// once per Staleness; default 5s.
	Staleness time.Duration
	// Line is the field's line in its file.
	Line int
}

// Defaults and bounds of the ban fields.
const (
	defaultBanGrowth    = 2
	defaultBanMax       = 24 * time.Hour
	defaultBanDecay     = 24 * time.Hour
	defaultBanStaleness = 5 * time.Second
	maxBanLength        = 365 * 24 * time.Hour
	maxBanAfter         = 1_000_000
	maxBanGrowth        = 100
	maxBanStaleness     = 10 * time.Minute
)

// String returns b as a policy file writes it.
func (b *Ban) String() string {
	return fmt.Sprintf("{after: %d, within: %s, for: %s, growth: %s, max: %s, decay: %s, staleness: %s}", b.After,
		FormatDuration(b.Within), FormatDuration(b.For), strconv.FormatFloat(b.Growth, 'g', -1, 64),
		FormatDuration(b.Max), FormatDuration(b.Decay), FormatDuration(b.Staleness))
}

func parseBan(p *fileParser, pol *Policy, v *Node) {
	const example = "ban must be a mapping, like {after: 3, within: 10m, for: 15m, growth: 2, max: 24h}"
	if v.Kind != MappingNode {
		p.errorf(v.Line, pol.Name, "%s", example)
		return
	}
	b := &Ban{Within: pol.Window, Growth: defaultBanGrowth, Decay: defaultBanDecay, Staleness: defaultBanStaleness, Line: v.Line}
	known := []string{"after", "within", "for", "growth", "max", "decay", "staleness"}
	seen := map[string]bool{}
	dur := func(fv *Node, name string, dst *time.Duration) {
		if d, ok := p.duration(fv, pol.Name, "ban."+name); ok {
			if d > maxBanLength {
				p.errorf(fv.Line, pol.Name, "ban.%s %s is longer than %s", name, FormatDuration(d), FormatDuration(maxBanLength))
			}
			*dst = d
		}
	}
	for _, kv := range p.subfields(pol.Name, "ban.", v, known) {
		k, fv := kv.key, kv.value
		seen[k.Value] = true
		switch k.Value {
		case "after":
			if n, ok := p.int(fv, pol.Name, "ban.after"); ok {
				if n < 1 || n > maxBanAfter {
					p.errorf(fv.Line, pol.Name, "ban.after %d must be between 1 and %d", n, maxBanAfter)
				}
				b.After = n
			}
		case "growth":
			g, err := strconv.ParseFloat(fv.Value, 64)
			if fv.Kind != ScalarNode || (fv.Tag != "!!int" && fv.Tag != "!!float") || err != nil || math.IsNaN(g) {
				p.errorf(fv.Line, pol.Name, "ban.growth %q must be a number, like 2 or 1.5", fv.Value)
				continue
			}
			if g < 1 || g > maxBanGrowth {
				p.errorf(fv.Line, pol.Name, "ban.growth %s must be between 1 (every ban as long) and %d", fv.Value, maxBanGrowth)
			}
			b.Growth = g
		case "within":
			dur(fv, "within", &b.Within)
		case "for":
			dur(fv, "for", &b.For)
		case "max":
			dur(fv, "max", &b.Max)
		case "decay":
			dur(fv, "decay", &b.Decay)
		case "staleness":
			if d, ok := p.duration(fv, pol.Name, "ban.staleness"); ok {
				if d > maxBanStaleness {
					p.errorf(fv.Line, pol.Name, "ban.staleness %s is longer than %s", FormatDuration(d), FormatDuration(maxBanStaleness))
				}
				b.Staleness = d
			}
		}
	}
	if !seen["after"] {
		p.errorf(v.Line, pol.Name, "ban needs `after` (how many denials ban the key)")
	}
	if !seen["for"] {
		p.errorf(v.Line, pol.Name, "ban needs `for` (how long the first ban lasts, like 15m)")
	}
	if !seen["max"] {
		b.Max = max(defaultBanMax, b.For)
	} else if b.Max < b.For {
		p.errorf(lineOfMapping(v, "max"), pol.Name, "ban.max %s is shorter than ban.for %s", FormatDuration(b.Max), FormatDuration(b.For))
	}
	if b.Within <= 0 && !seen["within"] {
		p.errorf(v.Line, pol.Name, "ban needs `within` (the period the denials must fall in), or a policy window")
	}
	pol.Ban = b
}

// lineOfMapping is the line of field name's value in mapping v, or v's.
func lineOfMapping(v *Node, name string) int {
	for i := 0; i+1 < len(v.Content); i += 2 {
		if v.Content[i].Value == name {
			return v.Content[i+1].Line
		}
	}
	return v.Line
}

// needBans refuses a ban on a policy whose strategy cannot have one
// (Strategy.Bans).
func (p *fileParser) needBans(pol *Policy, fields map[string]*Node, line int) {
	if pol.Ban != nil && pol.Strategy != nil && !pol.Strategy.Bans {
		var can []string
		for _, s := range strategies() {
			if s.Bans {
				can = append(can, s.Name)
			}
		}
		p.errorf(lineOf(fields, "ban", line), pol.Name, "ban needs a strategy whose denials a shared store counts (%s); strategy %s cannot ban",
			joinOr(can), pol.Strategy.Name)
	}
}

func joinOr(names []string) string {
	switch len(names) {
	case 0:
		return "none is linked"
	case 1:
		return names[0]
	}
	return fmt.Sprintf("%s or %s", joinComma(names[:len(names)-1]), names[len(names)-1])
}

func joinComma(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}
