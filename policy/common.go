package policy

import (
	"slices"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/internal/suggest"
)

// commonField is a field every policy has, whatever its strategy, with the
// function that parses it into the Policy. They run in this order, so a
// field's check can rely on those before it (every message names the
// policy; on_missing_key knows the key).
type commonField struct {
	name  string
	parse func(p *fileParser, pol *Policy, v *Node)
}

var commonFields = []commonField{
	{"name", parseName},
	{"strategy", parseStrategy},
	{"routes", parseRoutes},
	{"key", parseKey},
	{"on_missing_key", parseOnMissingKey},
	{"limit", parseLimit},
	{"window", parseWindow},
	{"cost", parseCost},
	{"on_store_error", parseOnStoreError},
	{"store_timeout", parseStoreTimeout},
	{"store_breaker", parseStoreBreaker},
	{"shadow", parseShadow},
	{"trusted_proxies", parseTrustedProxies},
	{"ipv6_prefix", parseIPv6Prefix},
	{"tiers", parseTiers},
	{"overrides", parseOverrides},
	{"override_staleness", parseOverrideStaleness},
	{"charge", parseCharge},
	{"charge_status", parseChargeStatus},
	{"refund_status", parseRefundStatus},
	{"period_start", parsePeriodStart},
	{"time_zone", parseTimeZone},
	{"reserve", parseReserve},
	{"max_delay", parseMaxDelay},
	{"ban", parseBan},
}

// required are the common fields a policy must have, with how the message
// for a missing one ends.
var required = map[string]string{
	"name":     "",
	"strategy": "",
	"routes":   `, like ["GET /paid/*"]`,
	"key":      " (ip, header:NAME, claim:NAME or global)",
	"limit":    " (requests per window)",
	"window":   ", like 1m",
}

func commonFieldNames() []string {
	names := make([]string, len(commonFields))
	for i, f := range commonFields {
		names[i] = f.name
	}
	return names
}

// parsePolicy parses one entry of the policies list: the common fields
// here, the strategy's own with its Parse.
func (p *fileParser) parsePolicy(n *Node) *Policy {
	if n.Kind != MappingNode {
		p.errorf(n.Line, "", "each policy must be a mapping with name, routes, key, strategy, limit and window")
		return nil
	}
	pol := &Policy{Line: n.Line, Cost: 1, StoreTimeout: defaultStoreTimeout, StoreBreaker: DefaultBreaker, IPv6Prefix: 64, OverrideStaleness: defaultOverrideStaleness}
	fields := map[string]*Node{}
	keyLines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if _, dup := fields[k.Value]; dup {
			p.errorf(k.Line, nameOf(n), "field %q appears twice", k.Value)
			continue
		}
		fields[k.Value], keyLines[k.Value] = v, k.Line
	}
	for _, f := range commonFields {
		v := fields[f.name]
		end, isRequired := required[f.name]
		switch {
		case v != nil:
			f.parse(p, pol, v)
		case f.name == "name":
			p.errorf(n.Line, "", "policy has no `name`")
		case isRequired:
			p.errorf(n.Line, pol.Name, "missing `%s`%s", f.name, end+strategyHint(f.name))
		}
	}
	// The rest belongs to the strategy.
	own := map[string]*Node{}
	common := commonFieldNames()
	for name, v := range fields {
		if slices.Contains(common, name) {
			continue
		}
		if s := pol.Strategy; s != nil && slices.Contains(s.Fields, name) {
			own[name] = v
			continue
		}
		if owner := fieldOwner(name); owner != "" {
			p.errorf(keyLines[name], pol.Name, "%s applies only to strategy %s", name, owner)
			continue
		}
		known := common
		if s := pol.Strategy; s != nil {
			known = append(slices.Clone(common), s.Fields...)
		}
		p.errorf(keyLines[name], pol.Name, "unknown field %q%s", name, suggest.DidYouMean(name, known))
	}
	p.finishPeriods(pol, fields, lineOf(fields, "window", n.Line))
	if pol.ChargeAfter && len(pol.ChargeStatus) > 0 {
		p.errorf(lineOf(fields, "charge_status", n.Line), pol.Name, "charge: response and charge_status do not go together; charge_status already charges after the response, for those statuses")
	}
	if pol.Reserve > 0 && !pol.ChargeAfter {
		p.errorf(lineOf(fields, "reserve", n.Line), pol.Name, "reserve needs charge: response (a reservation is settled with the cost the handler reports); without it the policy spends its cost")
	}
	if s := pol.Strategy; s != nil {
		if !s.Limits {
			refuse := func(f string) {
				p.errorf(lineOf(fields, f, n.Line), pol.Name, "%s needs a strategy whose limits can change per request; strategy %s takes its limit from the policy only", f, s.Name)
			}
			if pol.Tiers != nil {
				refuse("tiers")
			}
			if pol.Overrides {
				refuse("overrides")
			}
		}
		if _, set := fields["on_store_error"]; !set {
			pol.OnStoreError = s.OnStoreError
		}
		before := len(p.errs)
		pol.Options = s.Parse(&Fields{p: p, policy: pol, nodes: own, all: fields, line: n.Line})
		p.needAbilities(pol, fields, n.Line, before)
		p.needDelay(pol, fields, n.Line, before)
		p.needBans(pol, fields, n.Line)
	}
	return pol
}

// needAbilities refuses the fields of pol that need an ability its
// strategy's limiters lack, unless the strategy's Parse already said why
// (an error at the field's line since before).
func (p *fileParser) needAbilities(pol *Policy, fields map[string]*Node, line, before int) {
	s := pol.Strategy
	said := func(f string) bool {
		l := lineOf(fields, f, line)
		for _, e := range p.errs[before:] {
			if e.Line == l {
				return true
			}
		}
		return false
	}
	need := func(f string, set bool, a Abilities, msg string) {
		if set && !s.Abilities.Has(a) && !said(f) {
			p.errorf(lineOf(fields, f, line), pol.Name, msg, f, s.Name)
		}
	}
	need("on_store_error", pol.OnStoreError == FailLocal, CanLocal, "%s local needs a store to fall back from; strategy %s has none")
	need("charge", pol.ChargeAfter, CanSettle, "%s needs a strategy that can spend after the response; strategy %s cannot")
	need("charge_status", len(pol.ChargeStatus) > 0, CanSettle, "%s needs a strategy that can spend after the response; strategy %s cannot")
	need("refund_status", len(pol.RefundStatus) > 0, CanRefund, "%s needs a strategy that can give units back; strategy %s cannot")
}

// strategyHint lists the strategies a program knows, for the message about
// a missing strategy field.
func strategyHint(field string) string {
	if field != "strategy" {
		return ""
	}
	return " (" + strings.Join(strategyNames(), ", ") + ")"
}

func strategyNames() []string {
	var names []string
	for _, s := range strategies() {
		names = append(names, s.Name)
	}
	return names
}

// fieldOwner names the strategies that own a field, or "".
func fieldOwner(name string) string {
	var owners []string
	for _, s := range strategies() {
		if slices.Contains(s.Fields, name) {
			owners = append(owners, s.Name)
		}
	}
	return strings.Join(owners, " or ")
}

func lineOf(fields map[string]*Node, name string, def int) int {
	if v := fields[name]; v != nil {
		return v.Line
	}
	return def
}

// validName reports a name of a policy, list or tier: 1-64 characters of
// a-z, 0-9 and -, not starting or ending with - (the regular expression
// ^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$, which TestValidNameIsTheRegexp
// checks). Not a regexp: compiling that one at package init cost every
// cold start 44 KB in 242 allocations and a quarter of a millisecond.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func parseName(p *fileParser, pol *Policy, v *Node) {
	s, ok := p.str(v, "", "name")
	if !ok {
		return
	}
	if !validName(s) {
		p.errorf(v.Line, "", "name %q must be 1-64 characters of a-z, 0-9 and -, not starting or ending with -", s)
	}
	pol.Name = s
}

func parseStrategy(p *fileParser, pol *Policy, v *Node) {
	s, ok := p.str(v, pol.Name, "strategy")
	if !ok {
		return
	}
	if pol.Strategy = lookupStrategy(s); pol.Strategy == nil {
		names := strategyNames()
		hint := suggest.DidYouMean(s, names)
		if hint == "" {
			hint = " (a strategy is known once its package is imported: is this program built with it?)"
		}
		p.errorf(v.Line, pol.Name, "strategy %q is not one of %s%s", s, strings.Join(names, ", "), hint)
	}
}

func parseRoutes(p *fileParser, pol *Policy, v *Node) {
	var items []*Node
	switch v.Kind {
	case SequenceNode:
		items = v.Content
	case ScalarNode:
		items = []*Node{v}
	default:
		p.errorf(v.Line, pol.Name, "routes must be a list, like [\"GET /paid/*\"]")
		return
	}
	if len(items) == 0 {
		p.errorf(v.Line, pol.Name, "routes is empty")
	}
	var written []string
	for _, it := range items {
		s, ok := p.str(it, pol.Name, "routes")
		if !ok {
			continue
		}
		r, err := ParseRoute(s)
		if err != nil {
			p.errorf(it.Line, pol.Name, "%s", strings.TrimPrefix(err.Error(), "policy: "))
			continue
		}
		if j := slices.Index(pol.Routes, r); j >= 0 {
			// The same route twice, perhaps spelt differently ("/a" and
			// "/a/"): a mistake, most likely for another route.
			p.errorf(it.Line, pol.Name, "route %q is listed twice (it matches what %q does)", s, written[j])
			continue
		}
		pol.Routes, written = append(pol.Routes, r), append(written, s)
	}
}

func parseKey(p *fileParser, pol *Policy, v *Node) {
	s, ok := p.str(v, pol.Name, "key")
	if !ok {
		return
	}
	ks, err := ParseKeySource(s)
	if err != nil {
		p.errorf(v.Line, pol.Name, "%s", strings.TrimPrefix(err.Error(), "policy: "))
	}
	pol.Key = ks
}

func parseOnMissingKey(p *fileParser, pol *Policy, v *Node) {
	s, ok := p.str(v, pol.Name, "on_missing_key")
	if !ok {
		return
	}
	switch s {
	case "reject":
	case "ip":
		pol.MissingKeyToIP = true
	default:
		p.errorf(v.Line, pol.Name, "on_missing_key %q is not one of reject, ip", s)
	}
	if pol.Key.kind == KeyIP || pol.Key.kind == KeyGlobal {
		p.errorf(v.Line, pol.Name, "on_missing_key applies only to header: and claim: keys")
	}
}

func parseLimit(p *fileParser, pol *Policy, v *Node) {
	l, ok := p.int(v, pol.Name, "limit")
	if !ok {
		return
	}
	if l < 0 {
		p.errorf(v.Line, pol.Name, "limit %d must not be negative", l)
	}
	pol.Limit = l
}

func parseWindow(p *fileParser, pol *Policy, v *Node) {
	if u, ok := periodUnit(v.Value); ok && v.Kind == ScalarNode {
		pol.Period, pol.Window = Period{Unit: u}, u.Nominal()
		return
	}
	if d, ok := p.duration(v, pol.Name, "window"); ok {
		pol.Window = d
	}
}

// parseCost checks the cost is at least 1; whether it fits the policy's
// capacity (its limit, or a bucket's burst) is the strategy's to check.
func parseCost(p *fileParser, pol *Policy, v *Node) {
	c, ok := p.int(v, pol.Name, "cost")
	if !ok {
		return
	}
	if c < 1 {
		p.errorf(v.Line, pol.Name, "cost %d must be at least 1", c)
	}
	pol.Cost = c
}

func parseOnStoreError(p *fileParser, pol *Policy, v *Node) {
	s, ok := p.str(v, pol.Name, "on_store_error")
	if !ok {
		return
	}
	switch s {
	case "allow":
		pol.OnStoreError = FailOpen
	case "deny":
		pol.OnStoreError = FailClosed
	case "local":
		pol.OnStoreError = FailLocal
	default:
		p.errorf(v.Line, pol.Name, "on_store_error %q is not one of allow, deny, local", s)
	}
}

func parseStoreTimeout(p *fileParser, pol *Policy, v *Node) {
	d, ok := p.duration(v, pol.Name, "store_timeout")
	if !ok {
		return
	}
	if d > 30*time.Second {
		p.errorf(v.Line, pol.Name, "store_timeout %s is longer than 30s; a limiter must answer faster than the request it guards", d)
	}
	pol.StoreTimeout = d
}

func parseShadow(p *fileParser, pol *Policy, v *Node) {
	pol.Shadow, _ = p.bool(v, pol.Name, "shadow")
}

func usesIP(pol *Policy) bool { return pol.Key.kind == KeyIP || pol.MissingKeyToIP }

func parseTrustedProxies(p *fileParser, pol *Policy, v *Node) {
	t, ok := p.int(v, pol.Name, "trusted_proxies")
	if !ok {
		return
	}
	switch {
	case t < 0 || t > 16:
		p.errorf(v.Line, pol.Name, "trusted_proxies %d must be between 0 and 16", t)
	case !usesIP(pol):
		p.errorf(v.Line, pol.Name, "trusted_proxies applies only when the key is ip or falls back to ip")
	}
	pol.TrustedProxies = int(t)
}

func parseIPv6Prefix(p *fileParser, pol *Policy, v *Node) {
	t, ok := p.int(v, pol.Name, "ipv6_prefix")
	if !ok {
		return
	}
	switch {
	case t < 16 || t > 128:
		p.errorf(v.Line, pol.Name, "ipv6_prefix %d must be between 16 and 128", t)
	case !usesIP(pol):
		p.errorf(v.Line, pol.Name, "ipv6_prefix applies only when the key is ip or falls back to ip")
	}
	pol.IPv6Prefix = int(t)
}
