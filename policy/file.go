package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/internal/suggest"
)

// defaultStoreTimeout is a policy's time budget for its store calls.
const defaultStoreTimeout = 100 * time.Millisecond

// File is a parsed, validated policies.yaml.
type File struct {
	// Source names where the file came from, for messages.
	Source  string
	Version int
	// LegacyHeaders sends X-RateLimit-Limit/Remaining/Reset; default true.
	LegacyHeaders bool
	Policies      []*Policy
	// Lists are the allow and deny lists, checked before any policy.
	Lists []*List
}

// maxFileSize bounds the policy file, which is operator input but may
// come from an environment variable.
const maxFileSize = 1 << 20

type fileParser struct {
	file string
	errs Errors
}

func (p *fileParser) errorf(line int, policy, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Policy: policy, Msg: fmt.Sprintf(format, args...)})
}

func (p *fileParser) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	// By line, stable: an insertion sort (a file's errors are few, and
	// mostly in order already) rather than slices.SortStableFunc, whose
	// instantiation is 2 KB of every Lambda bootstrap.
	for i := 1; i < len(p.errs); i++ {
		for j := i; j > 0 && p.errs[j].Line < p.errs[j-1].Line; j-- {
			p.errs[j], p.errs[j-1] = p.errs[j-1], p.errs[j]
		}
	}
	return p.errs
}

func (p *fileParser) parseFile(doc *Node) *File {
	f := &File{Source: p.file, LegacyHeaders: true}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.errorf(0, "", "file is empty; it needs `version: 1` and a `policies:` list")
		return f
	}
	root := doc.Content[0]
	if root.Kind != MappingNode {
		p.errorf(root.Line, "", "top level must be a mapping with `version` and `policies`")
		return f
	}
	seen := map[string]bool{}
	var policiesNode *Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			p.errorf(k.Line, "", "field %q appears twice", k.Value)
			continue
		}
		seen[k.Value] = true
		switch k.Value {
		case "version":
			n, ok := p.int(v, "", "version")
			if ok && n != 1 {
				p.errorf(v.Line, "", "version %d is not supported; this edgelimit reads version 1", n)
			}
			f.Version = int(n)
		case "legacy_headers":
			f.LegacyHeaders, _ = p.bool(v, "", "legacy_headers")
		case "policies":
			policiesNode = v
		case "lists":
			f.Lists = p.parseLists(v)
		default:
			p.errorf(k.Line, "", "unknown field %q%s", k.Value, suggest.DidYouMean(k.Value, []string{"version", "legacy_headers", "policies", "lists"}))
		}
	}
	if !seen["version"] {
		p.errorf(root.Line, "", "missing `version: 1`")
	}
	if policiesNode == nil {
		p.errorf(root.Line, "", "missing `policies:` list")
		return f
	}
	if policiesNode.Kind != SequenceNode {
		p.errorf(policiesNode.Line, "", "`policies` must be a list")
		return f
	}
	names := map[string]int{}
	for _, n := range policiesNode.Content {
		pol := p.parsePolicy(n)
		if pol == nil {
			continue
		}
		if prev, dup := names[pol.Name]; dup && pol.Name != "" {
			p.errorf(pol.Line, pol.Name, "name already used by the policy on line %d", prev)
			continue
		}
		names[pol.Name] = pol.Line
		f.Policies = append(f.Policies, pol)
	}
	if len(policiesNode.Content) == 0 {
		p.errorf(policiesNode.Line, "", "`policies` is empty")
	}
	return f
}

func (p *fileParser) str(v *Node, policy, field string) (string, bool) {
	if v.Kind != ScalarNode || v.Tag == "!!null" {
		p.errorf(v.Line, policy, "%s must be a string", field)
		return "", false
	}
	return v.Value, true
}

func (p *fileParser) int(v *Node, policy, field string) (int64, bool) {
	if v.Kind != ScalarNode || v.Tag != "!!int" {
		p.errorf(v.Line, policy, "%s %q must be a whole number", field, v.Value)
		return 0, false
	}
	n, err := yamlInt(v.Value)
	if err != nil {
		p.errorf(v.Line, policy, "%s %q is not a whole number that fits in 64 bits", field, v.Value)
		return 0, false
	}
	return n, true
}

// yamlInt reads an !!int scalar as the YAML library does: underscores
// dropped, then decimal, 0x, 0o, 0b or a leading 0 (octal).
func yamlInt(s string) (int64, error) {
	return strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
}

func (p *fileParser) bool(v *Node, policy, field string) (bool, bool) {
	if v.Kind != ScalarNode || v.Tag != "!!bool" {
		p.errorf(v.Line, policy, "%s %q must be true or false", field, v.Value)
		return false, false
	}
	return v.Value == "true" || v.Value == "True" || v.Value == "TRUE", true
}

func (p *fileParser) duration(v *Node, policy, field string) (time.Duration, bool) {
	if v.Kind != ScalarNode {
		p.errorf(v.Line, policy, "%s must be a duration, like 10s", field)
		return 0, false
	}
	d, err := ParseDuration(v.Value)
	if err != nil {
		p.errorf(v.Line, policy, "%s %s", field, strings.TrimPrefix(err.Error(), "policy: "))
		return 0, false
	}
	return d, true
}

// parseDuration parses a positive duration as time.ParseDuration does, and
// also whole days ("1d"). A bare number is an error that says which unit to add.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("policy: duration is empty; use a unit, like 10s")
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("policy: %q needs a unit, like %ss", s, s)
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int64
		n, err = strconv.ParseInt(days, 10, 64)
		if err == nil && (n <= 0 || n > 3650) {
			return 0, fmt.Errorf("policy: %q must be between 1d and 3650d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil {
		return 0, fmt.Errorf("policy: %q is not a duration; write it like 500ms, 10s, 1m, 24h or 1d", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("policy: %q must be positive", s)
	}
	if d < time.Millisecond {
		return 0, fmt.Errorf("policy: %q is shorter than 1ms", s)
	}
	return d, nil
}

// formatDuration writes d compactly (1d, 24h, 1m30s) for tables and docs.
func FormatDuration(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	s = strings.Replace(s, "m0s", "m", 1)
	s = strings.Replace(s, "h0m", "h", 1)
	return s
}

func nameOf(n *Node) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" && n.Content[i+1].Kind == ScalarNode {
			return n.Content[i+1].Value
		}
	}
	return ""
}
