package policy

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/edgelimit/edgelimit/internal/suggest"
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
	// Match is what is compared: the client address (KeyIP) or a header's
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
func (p *fileParser) parseLists(v *Node) []*List {
	if v.Kind != SequenceNode {
		p.errorf(v.Line, "", "`lists` must be a list of {name, action, match, values}")
		return nil
	}
	var out []*List
	names := map[string]bool{}
	known := []string{"name", "action", "routes", "match", "values", "file", "env", "trusted_proxies"}
	for _, n := range v.Content {
		if n.Kind != MappingNode {
			p.errorf(n.Line, "", "each list must be a mapping with name, action, match and values")
			continue
		}
		l := &List{Line: n.Line}
		fields := map[string]*Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, fv := n.Content[i], n.Content[i+1]
			if !slices.Contains(known, k.Value) {
				p.errorf(k.Line, "", "list: unknown field %q%s", k.Value, suggest.DidYouMean(k.Value, known))
				continue
			}
			fields[k.Value] = fv
		}
		where := "list"
		if f := fields["name"]; f == nil {
			p.errorf(n.Line, "", "list has no `name`")
		} else if s, ok := p.str(f, "", "list name"); ok {
			if !validName(s) {
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
		l.Match = KeySource{kind: KeyIP}
		if f := fields["match"]; f != nil {
			if s, ok := p.str(f, "", "match"); ok {
				ks, err := ParseKeySource(s)
				switch {
				case err != nil:
					p.errorf(f.Line, "", "%s: match: %s", where, strings.TrimPrefix(err.Error(), "policy: "))
				case ks.kind == KeyGlobal:
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
				if t < 0 || t > 16 || l.Match.kind != KeyIP {
					p.errorf(f.Line, "", "%s: trusted_proxies must be 0 to 16, for a list that matches ip", where)
				}
				l.TrustedProxies = int(t)
			}
		}
		if f := fields["values"]; f != nil {
			items := []*Node{f}
			if f.Kind == SequenceNode {
				items = f.Content
			}
			for _, it := range items {
				s, ok := p.str(it, "", "values")
				if !ok {
					continue
				}
				if l.Match.kind == KeyIP {
					if _, err := ParseCIDR(s); err != nil {
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

// ParseCIDR reads an address or a CIDR, as an address list holds them; the
// error names the problem, not the value's neighbours.
func ParseCIDR(s string) (netip.Prefix, error) {
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

// ReadLists returns the values of each of f's lists, in the order of
// f.Lists: those the policy file wrote, then the list file's (one per line,
// blank lines and # comments ignored; a relative path is the policy file's
// directory's), then the environment variable's (separated by commas,
// spaces or newlines). It is what the engine reads when it is built, so a
// program can check all of it before it starts. An address list's values
// are checked as CIDRs or addresses ([ParseCIDR]). getenv reads the
// environment (nil: os.Getenv). Every bad value is reported, as Errors
// naming where it is (the list file and line, or the variable and the
// value's position in it); errors.Is(err, ErrBadFile) reports true.
func (f *File) ReadLists(getenv func(string) string) ([][]string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	p := &fileParser{file: f.Source}
	dir := f.dir()
	out := make([][]string, len(f.Lists))
	for i, l := range f.Lists {
		out[i] = l.read(p, dir, getenv)
	}
	if len(p.errs) > 0 {
		return nil, p.errs // in list order: they may name several files
	}
	return out, nil
}

// dir is the directory a list's relative file is read from: the policy
// file's, when Source names a file on disk, else "" (the working
// directory).
func (f *File) dir() string {
	if f.Source == "" {
		return ""
	}
	if st, err := os.Stat(f.Source); err == nil && !st.IsDir() {
		return filepath.Dir(f.Source)
	}
	return ""
}

// read returns the list's values, recording each bad one in p.
func (l *List) read(p *fileParser, dir string, getenv func(string) string) []string {
	vals := slices.Clone(l.Values)
	check := func(file string, line int, where, v string) {
		if l.Match.kind != KeyIP {
			return
		}
		if _, err := ParseCIDR(v); err != nil {
			p.errs = append(p.errs, &Error{File: file, Line: line, Msg: fmt.Sprintf("list %q: %s%s", l.Name, where, err)})
		}
	}
	if l.File != "" {
		path := l.File
		if !filepath.IsAbs(path) && dir != "" {
			path = filepath.Join(dir, path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			// An *fs.PathError names the file and what failed.
			p.errorf(l.Line, "", "list %q: %v", l.Name, err)
			return nil
		}
		for _, ln := range listLines(data) {
			check(path, ln.n, "", ln.v)
			vals = append(vals, ln.v)
		}
	}
	if l.Env != "" {
		fields := strings.FieldsFunc(getenv(l.Env), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' })
		for i, v := range fields {
			check(p.file, l.Line, fmt.Sprintf("environment variable %s, value %d: ", l.Env, i+1), v)
		}
		vals = append(vals, fields...)
	}
	return vals
}

// listLine is one value of a list file and its line.
type listLine struct {
	v string
	n int
}

// listLines returns a list file's values: one per line, blank lines and #
// comments ignored.
func listLines(data []byte) []listLine {
	var out []listLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, listLine{line, n})
		}
	}
	return out
}
