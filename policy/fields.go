package policy

import (
	"slices"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/internal/suggest"
)

// Fields gives a Strategy the fields of one policy that are its own, with
// typed accessors that report a malformed value at its file and line (so
// every strategy's messages read like the parser's own). An accessor
// returns the value and true when the field is present and well-formed;
// false when it is absent, or malformed (then the problem is recorded and
// the file fails to load).
type Fields struct {
	p      *fileParser
	policy *Policy
	nodes  map[string]*Node // the strategy's fields
	all    map[string]*Node // every field of the policy, for lines
	line   int              // the policy's (or the mapping's) line
	prefix string           // "proof_of_work." inside a nested mapping
}

// Policy returns the policy being parsed, with its common fields (Name,
// Routes, Key, Limit, Window, Cost, OnStoreError, ...) already set.
func (f *Fields) Policy() *Policy { return f.policy }

// Has reports whether the field is present.
func (f *Fields) Has(name string) bool { return f.nodes[name] != nil }

// Line returns the line of the field (one of the strategy's, or a common
// one like cost), or the policy's when it is absent.
func (f *Fields) Line(name string) int {
	if n := f.nodes[name]; n != nil {
		return n.Line
	}
	if n := f.all[name]; n != nil && f.prefix == "" {
		return n.Line
	}
	return f.line
}

// Errorf records a problem with the field (absent or not), at its line.
func (f *Fields) Errorf(name, format string, args ...any) {
	f.p.errorf(f.Line(name), f.policy.Name, format, args...)
}

// String returns a string field.
func (f *Fields) String(name string) (string, bool) {
	n := f.nodes[name]
	if n == nil {
		return "", false
	}
	return f.p.str(n, f.policy.Name, f.prefix+name)
}

// Int returns a whole-number field.
func (f *Fields) Int(name string) (int64, bool) {
	n := f.nodes[name]
	if n == nil {
		return 0, false
	}
	return f.p.int(n, f.policy.Name, f.prefix+name)
}

// Bool returns a true/false field.
func (f *Fields) Bool(name string) (bool, bool) {
	n := f.nodes[name]
	if n == nil {
		return false, false
	}
	return f.p.bool(n, f.policy.Name, f.prefix+name)
}

// Duration returns a duration field (500ms, 10s, 1m, 24h, 1d).
func (f *Fields) Duration(name string) (time.Duration, bool) {
	n := f.nodes[name]
	if n == nil {
		return 0, false
	}
	return f.p.duration(n, f.policy.Name, f.prefix+name)
}

// OneOf returns a string field that must be one of values, and records the
// problem, with a "did you mean", when it is not.
func (f *Fields) OneOf(name string, values ...string) (string, bool) {
	s, ok := f.String(name)
	if !ok {
		return "", false
	}
	if !slices.Contains(values, s) {
		f.Errorf(name, "%s%s %q is not one of %s%s", f.prefix, name, s, strings.Join(values, ", "), suggest.DidYouMean(s, values))
		return "", false
	}
	return s, true
}

// Map returns a nested mapping field, like proof_of_work: {bits: 16}, whose
// own fields must be among known.
func (f *Fields) Map(name string, known ...string) (*Fields, bool) {
	n := f.nodes[name]
	if n == nil {
		return nil, false
	}
	if n.Kind != MappingNode {
		f.Errorf(name, "%s%s must be a mapping, like {%s: ...}", f.prefix, name, strings.Join(known, ": ..., "))
		return nil, false
	}
	sub := &Fields{p: f.p, policy: f.policy, nodes: map[string]*Node{}, all: f.all, line: n.Line, prefix: f.prefix + name + "."}
	for _, kv := range f.p.subfields(f.policy.Name, sub.prefix, n, known) {
		sub.nodes[kv.key.Value] = kv.value
	}
	return sub, true
}

// subfield is one field of a nested mapping, its key and value nodes.
type subfield struct{ key, value *Node }

// subfields returns the fields of the mapping n (a policy's field whose
// value is a mapping: prefix is its name and a dot) in the file's order,
// recording each field not among known, with a "did you mean", and each
// field given twice, which it leaves out.
func (p *fileParser) subfields(pol, prefix string, n *Node, known []string) []subfield {
	var out []subfield
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case !slices.Contains(known, k.Value):
			p.errorf(k.Line, pol, "unknown field %s%s%s", prefix, k.Value, suggest.DidYouMean(k.Value, known))
		case seen[k.Value]:
			p.errorf(k.Line, pol, "field %s%s appears twice", prefix, k.Value)
		default:
			seen[k.Value] = true
			out = append(out, subfield{k, v})
		}
	}
	return out
}
