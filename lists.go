package edgelimit

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// List is an allow or a deny list of the policy file: client addresses
// (CIDRs, IPv4 and IPv6) or exact values of a header or claim, checked
// before any limiter and without a store call. A request a deny list
// matches is answered 403; one an allow list matches (and no deny list) is
// not limited at all. Large lists can come from a file or an environment
// variable.
type List struct {
	Name string
	// Deny: a match is refused; else it passes unlimited.
	Deny bool
	// Routes the list applies to; every request when empty.
	Routes []Route
	// Match is what is compared: the client address (keyIP) or a header's
	// or claim's value.
	Match KeySource
	// TrustedProxies, for an address list, as a policy's.
	TrustedProxies int
	// Values as the file wrote them (CIDRs, addresses or exact values),
	// and where more come from: a file (one value per line, # comments;
	// relative to the policy file) and an environment variable (values
	// separated by commas, spaces or newlines), read when the engine is
	// built.
	Values []string
	File   string
	Env    string
	Line   int
}

// parseLists parses the top-level lists field.
func (p *fileParser) parseLists(v *yaml.Node) []*List {
	if v.Kind != yaml.SequenceNode {
		p.errorf(v.Line, "", "`lists` must be a list of {name, action, match, values}")
		return nil
	}
	var out []*List
	names := map[string]bool{}
	known := []string{"name", "action", "routes", "match", "values", "file", "env", "trusted_proxies"}
	for _, n := range v.Content {
		if n.Kind != yaml.MappingNode {
			p.errorf(n.Line, "", "each list must be a mapping with name, action, match and values")
			continue
		}
		l := &List{Line: n.Line}
		fields := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, fv := n.Content[i], n.Content[i+1]
			if !slices.Contains(known, k.Value) {
				p.errorf(k.Line, "", "list: unknown field %q%s", k.Value, suggest(k.Value, known))
				continue
			}
			fields[k.Value] = fv
		}
		where := "list"
		if f := fields["name"]; f == nil {
			p.errorf(n.Line, "", "list has no `name`")
		} else if s, ok := p.str(f, "", "list name"); ok {
			if !policyNameRe.MatchString(s) {
				p.errorf(f.Line, "", "list name %q must be 1-64 characters of a-z, 0-9 and -", s)
			}
			if names[s] {
				p.errorf(f.Line, "", "list name %q is used twice", s)
			}
			names[s], l.Name, where = true, s, fmt.Sprintf("list %q", s)
		}
		if f := fields["action"]; f == nil {
			p.errorf(n.Line, "", "%s: missing `action` (allow or deny)", where)
		} else if s, ok := p.str(f, "", "action"); ok {
			switch s {
			case "allow":
			case "deny":
				l.Deny = true
			default:
				p.errorf(f.Line, "", "%s: action %q is not one of allow, deny", where, s)
			}
		}
		l.Match = KeySource{kind: keyIP}
		if f := fields["match"]; f != nil {
			if s, ok := p.str(f, "", "match"); ok {
				ks, err := parseKeySource(s)
				switch {
				case err != nil:
					p.errorf(f.Line, "", "%s: match: %s", where, strings.TrimPrefix(err.Error(), "edgelimit: "))
				case ks.kind == keyGlobal:
					p.errorf(f.Line, "", "%s: match global would match every request; use ip, header:NAME or claim:NAME", where)
				}
				l.Match = ks
			}
		}
		if f := fields["routes"]; f != nil {
			// The policies' route parser, its messages labelled as the list's.
			pol, before := &Policy{}, len(p.errs)
			parseRoutes(p, pol, f)
			for _, e := range p.errs[before:] {
				e.Msg = where + ": " + e.Msg
			}
			l.Routes = pol.Routes
		}
		if f := fields["trusted_proxies"]; f != nil {
			if t, ok := p.int(f, "", "trusted_proxies"); ok {
				if t < 0 || t > 16 || l.Match.kind != keyIP {
					p.errorf(f.Line, "", "%s: trusted_proxies must be 0 to 16, for a list that matches ip", where)
				}
				l.TrustedProxies = int(t)
			}
		}
		if f := fields["values"]; f != nil {
			items := []*yaml.Node{f}
			if f.Kind == yaml.SequenceNode {
				items = f.Content
			}
			for _, it := range items {
				s, ok := p.str(it, "", "values")
				if !ok {
					continue
				}
				if l.Match.kind == keyIP {
					if _, err := parseCIDR(s); err != nil {
						p.errorf(it.Line, "", "%s: %s", where, err)
						continue
					}
				}
				l.Values = append(l.Values, s)
			}
		}
		if f := fields["file"]; f != nil {
			l.File, _ = p.str(f, "", "file")
		}
		if f := fields["env"]; f != nil {
			l.Env, _ = p.str(f, "", "env")
		}
		if len(l.Values) == 0 && l.File == "" && l.Env == "" {
			p.errorf(n.Line, "", "%s: no values, file or env: it would match nothing", where)
		}
		out = append(out, l)
	}
	return out
}

// parseCIDR reads an address or a CIDR; the error names the problem, not
// the value's neighbours.
func parseCIDR(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR, like 10.0.0.0/8 or 2001:db8::/32", s)
		}
		return pfx.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or a CIDR, like 192.0.2.1 or 10.0.0.0/8", s)
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// compiledList is a List ready to match: its values in a CIDR set or a
// string set.
type compiledList struct {
	*List
	cidrs  *cidrSet
	values map[string]struct{}
}

// compileLists reads each list's file and environment variable and builds
// its matcher. dir is the policy file's directory, for relative files.
func compileLists(lists []*List, dir string, getenv func(string) string) ([]*compiledList, error) {
	var out []*compiledList
	for _, l := range lists {
		vals := slices.Clone(l.Values)
		if l.File != "" {
			path := l.File
			if !filepath.IsAbs(path) && dir != "" {
				path = filepath.Join(dir, path)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("edgelimit: list %q: %w", l.Name, err)
			}
			vals = append(vals, listLines(data)...)
		}
		if l.Env != "" {
			vals = append(vals, strings.FieldsFunc(getenv(l.Env), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' })...)
		}
		c := &compiledList{List: l}
		if l.Match.kind == keyIP {
			var pfxs []netip.Prefix
			for i, v := range vals {
				pfx, err := parseCIDR(v)
				if err != nil {
					return nil, fmt.Errorf("edgelimit: list %q: value %d: %w", l.Name, i+1, err)
				}
				pfxs = append(pfxs, pfx)
			}
			c.cidrs = newCIDRSet(pfxs)
		} else {
			c.values = make(map[string]struct{}, len(vals))
			for _, v := range vals {
				if v = strings.TrimSpace(v); v != "" {
					c.values[v] = struct{}{}
				}
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// listLines returns a list file's values: one per line, blank lines and #
// comments ignored.
func listLines(data []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
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
		return ok && l.cidrs.contains(ip)
	}
	var v string
	switch l.Match.kind {
	case keyHeader:
		if in.Header != nil {
			v = in.Header.Get(l.Match.name)
		}
	case keyClaim:
		if in.Claims != nil {
			v = in.Claims.Get(l.Match.name)
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
			e.listEvent(l, false)
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
	e.listEvent(allow, true)
	return unguarded
}

func (e *Engine) listEvent(l *compiledList, allowed bool) {
	if e.observe == nil {
		return
	}
	reason := "allow-list"
	if l.Deny {
		reason = "deny-list"
	}
	e.observe(Event{Policy: l.Name, Route: "", Strategy: "list", Allowed: allowed, Reason: reason})
}

// listDir is the directory a list's relative file is read from: the policy
// file's, when Source names a file on disk, else the working directory.
func listDir(source string) string {
	if source == "" {
		return ""
	}
	if st, err := os.Stat(source); err == nil && !st.IsDir() {
		return filepath.Dir(source)
	}
	return ""
}
