package edgelimit

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

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
		if rs := e.sets.get(mask); rs != nil {
			return rs
		}
		return e.sets.add(mask, func() *routeSet { return e.newRouteSet(matches) })
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
	if rs := e.bigSets.get(string(key)); rs != nil {
		return rs
	}
	return e.bigSets.add(string(key), func() *routeSet { return e.newRouteSet(matches) })
}

// routeSets maps what names a set of matched policies (a mask of their
// indexes, or their list for a file of more than 64) to its route set: a
// map read without a lock and copied on write, because the sets a file's
// routes can produce are few and all met early, and a typed map's lookup
// costs under half of sync.Map's, which hashes an interface (6.5 ns
// against 16 in a microbenchmark on our 2-core development VM).
type routeSets[K comparable] struct {
	m  atomic.Pointer[map[K]*routeSet]
	mu sync.Mutex // held to add
}

// get returns k's route set, or nil.
func (s *routeSets[K]) get(k K) *routeSet {
	if m := s.m.Load(); m != nil {
		return (*m)[k]
	}
	return nil
}

// add returns k's route set, building it unless another request has.
func (s *routeSets[K]) add(k K, build func() *routeSet) *routeSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old != nil {
		if rs, ok := (*old)[k]; ok {
			return rs
		}
	}
	rs := build()
	grown := map[K]*routeSet{k: rs}
	if old != nil {
		for k, v := range *old {
			grown[k] = v
		}
	}
	s.m.Store(&grown)
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
