package edgelimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// defaultStoreTimeout is a policy's time budget for its store calls.
const defaultStoreTimeout = 100 * time.Millisecond

// PolicyFile is a parsed, validated policies.yaml.
type PolicyFile struct {
	// Source names where the file came from, for messages.
	Source  string
	Version int
	// LegacyHeaders sends X-RateLimit-Limit/Remaining/Reset; default true.
	LegacyHeaders bool
	Policies      []*Policy
	// Lists are the allow and deny lists, checked before any policy.
	Lists []*List
}

// Policy is one rate-limit policy: the fields every strategy shares, and
// the strategy's own in Options. ParsePolicies fills every optional field
// with its default, so a loaded Policy is complete.
type Policy struct {
	Name   string
	Routes []Route
	// Key says where the client key comes from.
	Key KeySource
	// MissingKeyToIP: when a header or claim key is absent, key the
	// request by its source address (on_missing_key: ip) instead of
	// answering 400 (on_missing_key: reject, the default).
	MissingKeyToIP bool
	// Strategy decides the policy's requests; its Options are its own.
	Strategy *Strategy
	// Limit units per Window.
	Limit  int64
	Window time.Duration
	// Cost is the units every request on the policy spends; default 1.
	Cost int64
	// OnStoreError is what a failed (or too slow) store call means; the
	// strategy's default when the file sets none.
	OnStoreError OnStoreError
	// StoreTimeout is the policy's time budget for its store calls,
	// counted from the start of the request; default 100ms.
	StoreTimeout time.Duration
	// Shadow decides and reports but never blocks, and is never shown.
	Shadow bool
	// TrustedProxies is how many proxy hops in front of the API append to
	// X-Forwarded-For and are trusted; 0 (default) ignores the header.
	TrustedProxies int
	// IPv6Prefix groups IPv6 clients by this prefix length; default 64.
	IPv6Prefix int
	// Tiers, if set, choose each request's quota from a key source (an
	// authorizer's plan claim, a header a trusted upstream sets).
	Tiers *Tiers
	// Overrides: consult the per-key limits an operator sets at run time
	// (Config.Overrides), through a cache at most OverrideStaleness old.
	Overrides bool
	// OverrideStaleness bounds how old a cached override may be; default
	// 60s.
	OverrideStaleness time.Duration
	// ChargeAfter: the policy spends after the response, what the handler
	// reported (Verdict.ReportCost) or its Cost; a request is admitted
	// while at least one unit is left, and a charge larger than what is
	// left takes the quota below zero once.
	ChargeAfter bool
	// ChargeStatus, if set, are the only response statuses the policy
	// spends for, after the response (failed logins: 401, 403); a request
	// is admitted while one unit is left.
	ChargeStatus []int
	// RefundStatus are the response statuses after which the policy gives
	// back what the request spent (5xx: the service failed, not the client).
	RefundStatus []int
	// Options are the strategy's own fields, as its Parse returned them
	// (for example *durablecounter.Options).
	Options any
	// Line is the policy's line in its file.
	Line int
}

// Tiers choose a request's quota by a key source: each tier overrides some
// of the policy's limit, window and burst.
type Tiers struct {
	// By is where the tier's name comes from (header:NAME or claim:NAME).
	By KeySource
	// Default is the tier of a request without the key.
	Default string
	// RejectUnknown answers 400 to a request naming a tier the policy does
	// not have (on_unknown: reject); by default it gets the Default tier.
	RejectUnknown bool
	// Levels are the tiers by name; Names lists them in file order.
	Levels map[string]Limits
	Names  []string
}

// StrategyName returns the name of p's strategy, or "" when it has none.
func (p *Policy) StrategyName() string {
	if p.Strategy == nil {
		return ""
	}
	return p.Strategy.Name
}

// PolicyError is a problem in a policy file, pointing at the line.
type PolicyError struct {
	File   string
	Line   int
	Policy string // empty for file-level problems
	Msg    string
}

func (e *PolicyError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Policy != "" {
		fmt.Fprintf(&b, "policy %q: ", e.Policy)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrBadPolicyFile is what every error of ParsePolicies is (errors.Is).
var ErrBadPolicyFile = errors.New("edgelimit: bad policy file")

// PolicyErrors is every problem ParsePolicies found in a file, in line
// order. Its message is one problem per line, each naming the file and the
// line; errors.Is(err, ErrBadPolicyFile) reports true.
type PolicyErrors []*PolicyError

func (es PolicyErrors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Is reports whether target is ErrBadPolicyFile.
func (es PolicyErrors) Is(target error) bool { return target == ErrBadPolicyFile }

// Unwrap returns the problems, for errors.As.
func (es PolicyErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// LoadPolicies reads and validates a policy file.
func LoadPolicies(path string) (*PolicyFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // an *fs.PathError: it names the file and what failed
	}
	return ParsePolicies(path, data)
}

// maxPolicyFileSize bounds the policy file, which is operator input but may
// come from an environment variable.
const maxPolicyFileSize = 1 << 20

// ParsePolicies parses and validates a policy file. name is used in messages.
// All problems are reported together, as PolicyErrors.
func ParsePolicies(name string, data []byte) (*PolicyFile, error) {
	p := &fileParser{file: name}
	if len(data) > maxPolicyFileSize {
		p.errorf(0, "", "file is %d bytes, larger than the %d allowed", len(data), maxPolicyFileSize)
		return nil, p.err()
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		line, msg := syntaxError(data, err)
		p.errorf(line, "", "not valid YAML: %s", msg)
		return nil, p.err()
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(extra.Line, "", "more than one YAML document; put all policies in one")
		return nil, p.err()
	}
	f := p.parseFile(&doc)
	if err := p.err(); err != nil {
		return nil, err
	}
	return f, nil
}

type fileParser struct {
	file string
	errs PolicyErrors
}

func (p *fileParser) errorf(line int, policy, format string, args ...any) {
	p.errs = append(p.errs, &PolicyError{File: p.file, Line: line, Policy: policy, Msg: fmt.Sprintf(format, args...)})
}

func (p *fileParser) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(p.errs, func(a, b *PolicyError) int { return a.Line - b.Line })
	return p.errs
}

func (p *fileParser) parseFile(doc *yaml.Node) *PolicyFile {
	f := &PolicyFile{Source: p.file, LegacyHeaders: true}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.errorf(0, "", "file is empty; it needs `version: 1` and a `policies:` list")
		return f
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "", "top level must be a mapping with `version` and `policies`")
		return f
	}
	seen := map[string]bool{}
	var policiesNode *yaml.Node
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
			p.errorf(k.Line, "", "unknown field %q%s", k.Value, suggest(k.Value, []string{"version", "legacy_headers", "policies", "lists"}))
		}
	}
	if !seen["version"] {
		p.errorf(root.Line, "", "missing `version: 1`")
	}
	if policiesNode == nil {
		p.errorf(root.Line, "", "missing `policies:` list")
		return f
	}
	if policiesNode.Kind != yaml.SequenceNode {
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

func (p *fileParser) str(v *yaml.Node, policy, field string) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		p.errorf(v.Line, policy, "%s must be a string", field)
		return "", false
	}
	return v.Value, true
}

func (p *fileParser) int(v *yaml.Node, policy, field string) (int64, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
		p.errorf(v.Line, policy, "%s %q must be a whole number", field, v.Value)
		return 0, false
	}
	var n int64
	if err := v.Decode(&n); err != nil {
		p.errorf(v.Line, policy, "%s %q is not a whole number that fits in 64 bits", field, v.Value)
		return 0, false
	}
	return n, true
}

func (p *fileParser) bool(v *yaml.Node, policy, field string) (bool, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
		p.errorf(v.Line, policy, "%s %q must be true or false", field, v.Value)
		return false, false
	}
	return v.Value == "true" || v.Value == "True" || v.Value == "TRUE", true
}

func (p *fileParser) duration(v *yaml.Node, policy, field string) (time.Duration, bool) {
	if v.Kind != yaml.ScalarNode {
		p.errorf(v.Line, policy, "%s must be a duration, like 10s", field)
		return 0, false
	}
	d, err := parseDuration(v.Value)
	if err != nil {
		p.errorf(v.Line, policy, "%s %s", field, strings.TrimPrefix(err.Error(), "edgelimit: "))
		return 0, false
	}
	return d, true
}

// parseDuration parses a positive duration as time.ParseDuration does, and
// also whole days ("1d"). A bare number is an error that says which unit to add.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("edgelimit: duration is empty; use a unit, like 10s")
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("edgelimit: %q needs a unit, like %ss", s, s)
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int64
		n, err = strconv.ParseInt(days, 10, 64)
		if err == nil && (n <= 0 || n > 3650) {
			return 0, fmt.Errorf("edgelimit: %q must be between 1d and 3650d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil {
		return 0, fmt.Errorf("edgelimit: %q is not a duration; write it like 500ms, 10s, 1m, 24h or 1d", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("edgelimit: %q must be positive", s)
	}
	if d < time.Millisecond {
		return 0, fmt.Errorf("edgelimit: %q is shorter than 1ms", s)
	}
	return d, nil
}

// formatDuration writes d compactly (1d, 24h, 1m30s) for tables and docs.
func formatDuration(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	s = strings.Replace(s, "m0s", "m", 1)
	s = strings.Replace(s, "h0m", "h", 1)
	return s
}

func nameOf(n *yaml.Node) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" && n.Content[i+1].Kind == yaml.ScalarNode {
			return n.Content[i+1].Value
		}
	}
	return ""
}

// suggest returns ` (did you mean "x"?)` for a near miss, else "".
func suggest(got string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if l := commonPrefix(got, k); l >= 4 && l >= len(got)-2 {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
		if d := editDistance(got, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
