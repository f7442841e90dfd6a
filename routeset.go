package edgelimit

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/edgelimit/edgelimit/policy"
)

// routeSet is the set of policies that guard one kind of request (the
// routes it matches), built once and cached by the set's policy mask.
type routeSet struct {
	label    string
	policies []member
	// policyHeader is the RateLimit-Policy value when every listed
	// (non-shadow) policy answers with its default quota.
	policyHeader string
	// plain limiters are decided first, one by one (soft ones are refunded
	// if another denies); then each batch group, atomically.
	plain  []member
	groups [][]member
	// finishes: some policy has work after the response (Verdict.Finish).
	finishes bool
	// delays: some policy may admit for a later turn (max_delay), so an
	// admitted request may wait (wait.go).
	delays bool
	// policyVals is policyHeader as a header value, shared by every
	// response (never changed).
	policyVals []string
	// verdicts are the route's released Verdicts, sized for its policies.
	verdicts sync.Pool
}

// verdict returns a Verdict for a request of the route: a released one,
// else a new one with room for its policies.
func (rs *routeSet) verdict() *Verdict {
	v, _ := rs.verdicts.Get().(*Verdict)
	if v == nil {
		v = newVerdict(len(rs.policies))
	}
	v.pool = &rs.verdicts
	return v
}

// member is a policy of a route set and its slot: the index of its
// request, outcome and Decision in this route's per-request arrays.
type member struct {
	*compiled
	slot int
}

// match returns the set of policies whose routes match the canonical path,
// or the gateway's route template, or nil.
func (e *Engine) match(method, path, template string) *routeSet {
	matches := func(r policy.Route) bool {
		return r.Matches(method, path) || template != "" && r.Matches(method, template)
	}
	if len(e.policies) <= 64 {
		var mask uint64
		for _, r := range e.routes {
			if matches(r.route) {
				mask |= 1 << uint(r.policy)
			}
		}
		if mask == 0 {
			return nil
		}
		if m := e.sets.Load(); m != nil {
			if rs, ok := (*m)[mask]; ok {
				return rs
			}
		}
		return e.addRouteSet(mask, matches)
	}
	var key []byte
	for _, r := range e.routes {
		if matches(r.route) {
			key = strconv.AppendInt(key, int64(r.policy), 36)
			key = append(key, ',')
		}
	}
	if key == nil {
		return nil
	}
	if rs, ok := e.bigSets.Load(string(key)); ok {
		return rs.(*routeSet)
	}
	rs := e.newRouteSet(matches)
	e.bigSets.Store(string(key), rs)
	return rs
}

// addRouteSet builds the route set of mask and adds it to e.sets, unless
// another request has.
func (e *Engine) addRouteSet(mask uint64, matches func(policy.Route) bool) *routeSet {
	e.setsMu.Lock()
	defer e.setsMu.Unlock()
	old := e.sets.Load()
	if old != nil {
		if rs, ok := (*old)[mask]; ok {
			return rs
		}
	}
	rs := e.newRouteSet(matches)
	m := map[uint64]*routeSet{mask: rs}
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	e.sets.Store(&m)
	return rs
}

func (e *Engine) newRouteSet(matches func(policy.Route) bool) *routeSet {
	rs := &routeSet{}
	var best policy.Route
	bestScore := -1
	seen := map[int]bool{}
	var policies []*compiled
	for _, r := range e.routes {
		if !matches(r.route) {
			continue
		}
		if s := specificity(r.route); s > bestScore {
			best, bestScore = r.route, s
		}
		if !seen[r.policy] {
			seen[r.policy] = true
			policies = append(policies, e.policies[r.policy])
		}
	}
	slices.SortFunc(policies, func(a, b *compiled) int { return a.index - b.index })
	for slot, c := range policies {
		rs.policies = append(rs.policies, member{c, slot})
	}
	rs.label = best.String()
	var items []string
	groups := map[string]int{}
	for _, c := range rs.policies {
		if !c.Shadow {
			items = append(items, c.item)
		}
		rs.finishes = rs.finishes || c.finishes
		rs.delays = rs.delays || c.MaxDelay > 0
		// A policy that may admit for a later turn is decided on its own:
		// an atomic batch has no turn to report.
		if c.batch != nil && !c.Shadow && !c.deferred && c.MaxDelay == 0 {
			k := c.batch.BatchKey()
			gi, ok := groups[k]
			if !ok {
				gi = len(rs.groups)
				groups[k] = gi
				rs.groups = append(rs.groups, nil)
			}
			rs.groups[gi] = append(rs.groups[gi], c)
			continue
		}
		rs.plain = append(rs.plain, c)
	}
	rs.policyHeader = strings.Join(items, ", ")
	rs.policyVals = []string{rs.policyHeader}
	return rs
}

// specificity orders routes for labelling: exact before prefix, longer first.
func specificity(r policy.Route) int {
	n := len(r.Path) * 2
	if !r.Prefix {
		n++
	}
	if r.Method != "ANY" {
		n += 1 << 20
	}
	return n
}

// templatePath returns the canonical path of the route an API gateway
// matched, in its own syntax ("/paid/{resource}", "/{proxy+}"), from a
// route key ("GET /paid/{resource}"; "$default" has none) or a bare resource
// path. It returns "" when there is none.
func templatePath(route string) string {
	if route == "" || route[0] == '$' {
		return ""
	}
	if i := strings.IndexByte(route, ' '); i >= 0 {
		route = route[i+1:]
	}
	if route == "" || route[0] != '/' || len(route) > maxPathLength {
		return ""
	}
	return path.Clean(route)
}
