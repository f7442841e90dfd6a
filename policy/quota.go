package policy

// The common fields of quotas: tiers, overrides, and charging after the
// response.

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/internal/suggest"
)

// defaultOverrideStaleness is how old a cached override may be by default.
const defaultOverrideStaleness = time.Minute

func parseTiers(p *fileParser, pol *Policy, v *Node) {
	if v.Kind != MappingNode {
		p.errorf(v.Line, pol.Name, "tiers must be a mapping, like {by: claim:plan, default: free, levels: {free: {limit: 100}, pro: {limit: 10000}}}")
		return
	}
	t := &Tiers{Levels: map[string]Limits{}}
	fields := map[string]*Node{}
	known := []string{"by", "default", "on_unknown", "levels"}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, fv := v.Content[i], v.Content[i+1]
		if !slices.Contains(known, k.Value) {
			p.errorf(k.Line, pol.Name, "unknown field tiers.%s%s", k.Value, suggest.DidYouMean(k.Value, known))
			continue
		}
		fields[k.Value] = fv
	}
	if by := fields["by"]; by == nil {
		p.errorf(v.Line, pol.Name, "tiers needs `by`, the key source that names the tier (header:NAME or claim:NAME)")
	} else if s, ok := p.str(by, pol.Name, "tiers.by"); ok {
		ks, err := ParseKeySource(s)
		switch {
		case err != nil:
			p.errorf(by.Line, pol.Name, "tiers.by: %s", strings.TrimPrefix(err.Error(), "policy: "))
		case ks.kind != KeyHeader && ks.kind != KeyClaim:
			p.errorf(by.Line, pol.Name, "tiers.by %q must be header:NAME or claim:NAME", s)
		}
		t.By = ks
	}
	if u := fields["on_unknown"]; u != nil {
		if s, ok := p.str(u, pol.Name, "tiers.on_unknown"); ok {
			switch s {
			case "default":
			case "reject":
				t.RejectUnknown = true
			default:
				p.errorf(u.Line, pol.Name, "tiers.on_unknown %q is not one of default, reject", s)
			}
		}
	}
	levels := fields["levels"]
	switch {
	case levels == nil:
		p.errorf(v.Line, pol.Name, "tiers needs `levels`, like {free: {limit: 100}, pro: {limit: 10000}}")
	case levels.Kind != MappingNode || len(levels.Content) == 0:
		p.errorf(levels.Line, pol.Name, "tiers.levels must be a mapping of tier names to {limit, window, burst}")
	default:
		for i := 0; i+1 < len(levels.Content); i += 2 {
			k, lv := levels.Content[i], levels.Content[i+1]
			if !validName(k.Value) {
				p.errorf(k.Line, pol.Name, "tier name %q must be 1-64 characters of a-z, 0-9 and -", k.Value)
				continue
			}
			if _, dup := t.Levels[k.Value]; dup {
				p.errorf(k.Line, pol.Name, "tier %q appears twice", k.Value)
				continue
			}
			t.Levels[k.Value] = p.tierLimits(pol, k.Value, lv)
			t.Names = append(t.Names, k.Value)
		}
	}
	if d := fields["default"]; d == nil {
		p.errorf(v.Line, pol.Name, "tiers needs `default`, the tier of a request without %s", t.By)
	} else if s, ok := p.str(d, pol.Name, "tiers.default"); ok {
		if _, found := t.Levels[s]; !found && len(t.Names) > 0 {
			p.errorf(d.Line, pol.Name, "tiers.default %q is not one of the levels %s%s", s, strings.Join(t.Names, ", "), suggest.DidYouMean(s, t.Names))
		}
		t.Default = s
	}
	pol.Tiers = t
}

// tierLimits parses one tier's {limit, window, burst}: the fields it
// changes; the others are the policy's. An empty tier ({}) is the policy's
// own quota, so that the default tier follows the policy's limit (and an
// EDGELIMIT_OVERRIDES edit of it).
func (p *fileParser) tierLimits(pol *Policy, name string, v *Node) Limits {
	var l Limits
	if v.Kind != MappingNode {
		p.errorf(v.Line, pol.Name, "tier %q must be a mapping, like {limit: 100, window: 1d}", name)
		return l
	}
	field := "tiers.levels." + name + "."
	known := []string{"limit", "window", "burst"}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, fv := v.Content[i], v.Content[i+1]
		switch k.Value {
		case "limit":
			if n, ok := p.int(fv, pol.Name, field+"limit"); ok {
				if n < 0 {
					p.errorf(fv.Line, pol.Name, "%slimit %d must not be negative", field, n)
				}
				l.Limit = n
			}
		case "window":
			if u, ok := periodUnit(fv.Value); ok && fv.Kind == ScalarNode {
				l.Period, l.Window = Period{Unit: u}, u.Nominal()
			} else if d, ok := p.duration(fv, pol.Name, field+"window"); ok {
				l.Window = d
			}
		case "burst":
			if n, ok := p.int(fv, pol.Name, field+"burst"); ok {
				if n < 1 {
					p.errorf(fv.Line, pol.Name, "%sburst %d must be at least 1", field, n)
				}
				l.Burst = n
			}
		default:
			p.errorf(k.Line, pol.Name, "unknown field %s%s%s", field, k.Value, suggest.DidYouMean(k.Value, known))
		}
	}
	return l
}

func parseOverrides(p *fileParser, pol *Policy, v *Node) {
	pol.Overrides, _ = p.bool(v, pol.Name, "overrides")
}

func parseOverrideStaleness(p *fileParser, pol *Policy, v *Node) {
	d, ok := p.duration(v, pol.Name, "override_staleness")
	if !ok {
		return
	}
	if d > time.Hour {
		p.errorf(v.Line, pol.Name, "override_staleness %s is longer than 1h", d)
	}
	pol.OverrideStaleness = d
}

func parseCharge(p *fileParser, pol *Policy, v *Node) {
	s, ok := p.str(v, pol.Name, "charge")
	if !ok {
		return
	}
	switch s {
	case "request":
	case "response":
		pol.ChargeAfter = true
	default:
		p.errorf(v.Line, pol.Name, "charge %q is not one of request, response", s)
	}
}

func parseChargeStatus(p *fileParser, pol *Policy, v *Node) {
	pol.ChargeStatus = p.statuses(v, pol.Name, "charge_status")
}

func parseReserve(p *fileParser, pol *Policy, v *Node) {
	n, ok := p.int(v, pol.Name, "reserve")
	if !ok {
		return
	}
	if n < 1 {
		p.errorf(v.Line, pol.Name, "reserve %d must be at least 1", n)
		return
	}
	pol.Reserve = n
}

func parseRefundStatus(p *fileParser, pol *Policy, v *Node) {
	pol.RefundStatus = p.statuses(v, pol.Name, "refund_status")
}

// statuses parses a list of HTTP statuses: codes (401) and classes (5xx).
func (p *fileParser) statuses(v *Node, policy, field string) []int {
	items := []*Node{v}
	if v.Kind == SequenceNode {
		items = v.Content
	}
	var out []int
	for _, it := range items {
		if it.Kind != ScalarNode {
			p.errorf(it.Line, policy, "%s must be a list of statuses, like [401, 403] or [5xx]", field)
			continue
		}
		s := strings.ToLower(strings.TrimSpace(it.Value))
		if len(s) == 3 && s[1:] == "xx" && s[0] >= '1' && s[0] <= '5' {
			base := int(s[0]-'0') * 100
			for c := base; c < base+100; c++ {
				out = append(out, c)
			}
			continue
		}
		// strconv, not fmt.Sscanf: the scanner is 18 KB of every bootstrap.
		code, err := strconv.Atoi(s)
		if err != nil || code < 100 || code > 599 || strconv.Itoa(code) != s {
			p.errorf(it.Line, policy, "%s: %q is not a status (100-599) or a class like 5xx", field, it.Value)
			continue
		}
		out = append(out, code)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
