package edgelimit

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/edgelimit/edgelimit/internal/cidrset"
	"github.com/edgelimit/edgelimit/policy"
)

// compiledList is a list of the policy file ready to match: its values in
// a CIDR set or a string set.
type compiledList struct {
	*policy.List
	cidrs  *cidrset.Set
	values map[string]struct{}
}

// compileLists reads each list's values (policy.File.ReadLists: its file's
// and its environment variable's too) and builds its matcher.
func compileLists(f *policy.File, getenv func(string) string) ([]*compiledList, error) {
	all, err := f.ReadLists(getenv)
	if err != nil {
		return nil, err
	}
	var out []*compiledList
	for i, l := range f.Lists {
		c := &compiledList{List: l}
		if l.Match.Kind() == policy.KeyIP {
			pfxs := make([]netip.Prefix, 0, len(all[i]))
			for _, v := range all[i] {
				pfx, _ := policy.ParseCIDR(v) // ReadLists checked it
				pfxs = append(pfxs, pfx)
			}
			c.cidrs = cidrset.New(pfxs)
		} else {
			c.values = make(map[string]struct{}, len(all[i]))
			for _, v := range all[i] {
				if v = strings.TrimSpace(v); v != "" {
					c.values[v] = struct{}{}
				}
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// applies reports whether the list guards this request.
func (l *compiledList) applies(method, path, template string) bool {
	if len(l.Routes) == 0 {
		return true
	}
	for _, r := range l.Routes {
		if r.Matches(method, path) || template != "" && r.Matches(method, template) {
			return true
		}
	}
	return false
}

// matches reports whether the request's address or key is on the list.
func (l *compiledList) matches(in *Input) bool {
	if l.cidrs != nil {
		ip, ok := clientIP(in.SourceIP, in.Header, l.TrustedProxies)
		return ok && l.cidrs.Contains(ip)
	}
	var v string
	switch l.Match.Kind() {
	case policy.KeyHeader:
		if in.Header != nil {
			v = in.Header.Get(l.Match.Name())
		}
	case policy.KeyClaim:
		if in.Claims != nil {
			v = in.Claims.Get(l.Match.Name())
		}
	}
	if v = strings.TrimSpace(v); v == "" {
		return false
	}
	_, ok := l.values[v]
	return ok
}

// checkLists answers a request a list decides: a 403 for a deny list's
// match, an unlimited pass for an allow list's (when no deny list matched).
// It returns nil when no list decides.
func (e *Engine) checkLists(ctx context.Context, in *Input, method, path, template string) *Verdict {
	var allow *compiledList
	for _, l := range e.lists {
		if !l.applies(method, path, template) || !l.matches(in) {
			continue
		}
		if l.Deny {
			e.log.LogAttrs(ctx, slog.LevelInfo, "edgelimit: refused by a deny list", slog.String("list", l.Name))
			e.listEvent(ctx, l, false)
			v := newVerdict(0)
			forbidden(v)
			return v
		}
		if allow == nil {
			allow = l
		}
	}
	if allow == nil {
		return nil
	}
	e.listEvent(ctx, allow, true)
	return unguarded
}

func (e *Engine) listEvent(ctx context.Context, l *compiledList, allowed bool) {
	if e.observe == nil {
		return
	}
	reason := "allow-list"
	if l.Deny {
		reason = "deny-list"
	}
	e.observe(Event{Policy: l.Name, Route: "", Strategy: "list", Allowed: allowed, Reason: reason, Context: ctx})
}
