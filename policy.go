package edgelimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Strategies a policy can name.
const (
	StrategyDurable = "durable"
	StrategyKV      = "kv"
	StrategySigned  = "signed"
)

// Algorithms of the durable strategy (and the one of kv).
const (
	AlgorithmFixedWindow   = "fixed-window"
	AlgorithmSlidingWindow = "sliding-window"
	AlgorithmSlidingLog    = "sliding-log"
	AlgorithmGCRA          = "gcra"
	AlgorithmTokenBucket   = "token-bucket"
)

// Store-error modes.
const (
	FailOpen   = "allow"
	FailClosed = "deny"
	// FailLocal decides with an in-process limiter of the same policy while
	// the store fails: each instance still enforces the limit on its own.
	FailLocal = "local"
)

// Missing-key modes.
const (
	MissingKeyReject = "reject"
	MissingKeyIP     = "ip"
)

// DefaultStoreTimeout is the time budget of one store call.
const DefaultStoreTimeout = 100 * time.Millisecond

// PolicyFile is a parsed, validated policies.yaml.
type PolicyFile struct {
	// Source names where the file came from, for messages.
	Source  string
	Version int
	// LegacyHeaders sends X-RateLimit-Limit/Remaining/Reset; default true.
	LegacyHeaders bool
	Policies      []*Policy
}

// Policy is one rate-limit policy. Zero-valued optional fields are filled
// with their defaults by ParsePolicies, so a loaded Policy is complete.
type Policy struct {
	Name   string
	Routes []Route
	// Key says where the client key comes from.
	Key KeySource
	// OnMissingKey is "reject" (400, the default) or "ip" (fall back to the
	// source address) when a header or claim key is absent.
	OnMissingKey string
	Strategy     string
	// Algorithm defaults to fixed-window for durable, token-bucket for kv and
	// fixed-window for signed.
	Algorithm string
	Limit     int64
	Window    time.Duration
	// Burst is the bucket capacity of gcra and kv; default Limit.
	Burst int64
	// Cost is the units every request on the policy spends; default 1.
	Cost int64
	// OnStoreError is "allow" (fail open), "deny" (fail closed: 503) or
	// "local" (an in-process limiter of the same policy decides, so each
	// instance still holds the limit; see Config.Fallback).
	// Default deny for durable, allow for kv and signed.
	OnStoreError string
	// StoreTimeout is the budget of one store call; default 100ms.
	StoreTimeout time.Duration
	// Shadow decides and reports but never blocks.
	Shadow bool
	// TrustedProxies is how many proxy hops in front of the API append to
	// X-Forwarded-For and are trusted; 0 (default) ignores the header.
	TrustedProxies int
	// IPv6Prefix groups IPv6 clients by this prefix length; default 64.
	IPv6Prefix int
	// Shards spreads one hot key over N items (durable); default 1.
	Shards int
	// SyncInterval is how often kv writes a hot key back; 0 = strategy default.
	SyncInterval time.Duration
	// DenyCache answers repeat denials locally (durable); default true.
	DenyCache bool
	// ProofOfWork, for the signed strategy, makes a fresh window cost work.
	ProofOfWork *ProofOfWork
	// Line is the policy's line in its file.
	Line int
}

// ProofOfWork configures the challenges of a signed policy.
type ProofOfWork struct {
	// Bits of leading zeros the proof's SHA-256 needs; default 16.
	Bits int
	// TTL is how long a challenge can be answered; default 10s.
	TTL time.Duration
}

// Capacity returns the policy's bucket capacity: Burst when set, else Limit.
func (p *Policy) Capacity() int64 {
	if p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
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

// MaxPolicyFileSize bounds the policy file, which is operator input but may
// come from an environment variable.
const MaxPolicyFileSize = 1 << 20

// ParsePolicies parses and validates a policy file. name is used in messages.
// All problems are reported together, as PolicyErrors.
func ParsePolicies(name string, data []byte) (*PolicyFile, error) {
	p := &fileParser{file: name}
	if len(data) > MaxPolicyFileSize {
		p.errorf(0, "", "file is %d bytes, larger than the %d allowed", len(data), MaxPolicyFileSize)
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
		default:
			p.errorf(k.Line, "", "unknown field %q%s", k.Value, suggest(k.Value, []string{"version", "legacy_headers", "policies"}))
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

var policyFields = []string{
	"name", "routes", "key", "on_missing_key", "strategy", "algorithm", "limit", "window", "burst", "cost",
	"on_store_error", "store_timeout", "shadow", "trusted_proxies", "ipv6_prefix", "shards", "sync_interval",
	"deny_cache", "proof_of_work",
}

var policyNameRe = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$`)

func (p *fileParser) parsePolicy(n *yaml.Node) *Policy {
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "", "each policy must be a mapping with name, routes, key, strategy, limit and window")
		return nil
	}
	pol := &Policy{Line: n.Line, DenyCache: true}
	fields := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if _, dup := fields[k.Value]; dup {
			p.errorf(k.Line, "", "field %q appears twice", k.Value)
			continue
		}
		if !slices.Contains(policyFields, k.Value) {
			p.errorf(k.Line, nameOf(n), "unknown field %q%s", k.Value, suggest(k.Value, policyFields))
			continue
		}
		fields[k.Value] = v
	}
	// name first, so every later message can name the policy.
	if v := fields["name"]; v == nil {
		p.errorf(n.Line, "", "policy has no `name`")
	} else if s, ok := p.str(v, "", "name"); ok {
		if !policyNameRe.MatchString(s) {
			p.errorf(v.Line, "", "name %q must be 1-64 characters of a-z, 0-9 and -, not starting or ending with -", s)
		}
		pol.Name = s
	}
	name := pol.Name
	line := func(field string) int {
		if v := fields[field]; v != nil {
			return v.Line
		}
		return n.Line
	}

	// strategy decides which other fields make sense.
	if v := fields["strategy"]; v == nil {
		p.errorf(n.Line, name, "missing `strategy` (durable, kv or signed)")
	} else if s, ok := p.str(v, name, "strategy"); ok {
		switch s {
		case StrategyDurable, StrategyKV, StrategySigned:
			pol.Strategy = s
		default:
			p.errorf(v.Line, name, "strategy %q is not one of durable, kv, signed%s", s, suggest(s, []string{"durable", "kv", "signed"}))
		}
	}

	if v := fields["routes"]; v == nil {
		p.errorf(n.Line, name, "missing `routes`, like [\"GET /paid/*\"]")
	} else {
		pol.Routes = p.routes(v, name)
	}

	if v := fields["key"]; v == nil {
		p.errorf(n.Line, name, "missing `key` (ip, header:NAME, claim:NAME or global)")
	} else if s, ok := p.str(v, name, "key"); ok {
		ks, err := ParseKeySource(s)
		if err != nil {
			p.errorf(v.Line, name, "%s", strings.TrimPrefix(err.Error(), "edgelimit: "))
		}
		pol.Key = ks
	}

	pol.OnMissingKey = MissingKeyReject
	if v := fields["on_missing_key"]; v != nil {
		if s, ok := p.str(v, name, "on_missing_key"); ok {
			switch s {
			case MissingKeyReject, MissingKeyIP:
				pol.OnMissingKey = s
			default:
				p.errorf(v.Line, name, "on_missing_key %q is not one of reject, ip", s)
			}
			if pol.Key.Kind == KeyIP || pol.Key.Kind == KeyGlobal {
				p.errorf(v.Line, name, "on_missing_key applies only to header: and claim: keys")
			}
		}
	}

	if v := fields["algorithm"]; v != nil {
		if s, ok := p.str(v, name, "algorithm"); ok {
			pol.Algorithm = s
		}
	}
	switch pol.Strategy {
	case StrategyDurable:
		algs := []string{AlgorithmFixedWindow, AlgorithmSlidingWindow, AlgorithmSlidingLog, AlgorithmGCRA}
		if pol.Algorithm == "" {
			pol.Algorithm = AlgorithmFixedWindow
		} else if !slices.Contains(algs, pol.Algorithm) {
			p.errorf(line("algorithm"), name, "algorithm %q is not one of %s%s", pol.Algorithm, strings.Join(algs, ", "), suggest(pol.Algorithm, algs))
		}
	case StrategyKV:
		if pol.Algorithm == "" {
			pol.Algorithm = AlgorithmTokenBucket
		} else if pol.Algorithm != AlgorithmTokenBucket {
			p.errorf(line("algorithm"), name, "strategy kv has one algorithm, token-bucket; %q is for strategy durable", pol.Algorithm)
		}
	case StrategySigned:
		if pol.Algorithm == "" {
			pol.Algorithm = AlgorithmFixedWindow
		} else if pol.Algorithm != AlgorithmFixedWindow {
			p.errorf(line("algorithm"), name, "strategy signed counts in fixed windows; remove algorithm %q", pol.Algorithm)
		}
	}

	if v := fields["limit"]; v == nil {
		p.errorf(n.Line, name, "missing `limit` (requests per window)")
	} else if l, ok := p.int(v, name, "limit"); ok {
		if l < 0 {
			p.errorf(v.Line, name, "limit %d must not be negative", l)
		}
		pol.Limit = l
	}
	if v := fields["window"]; v == nil {
		p.errorf(n.Line, name, "missing `window`, like 1m")
	} else if d, ok := p.duration(v, name, "window"); ok {
		pol.Window = d
	}

	if v := fields["burst"]; v != nil {
		if b, ok := p.int(v, name, "burst"); ok {
			switch {
			case b < 1:
				p.errorf(v.Line, name, "burst %d must be at least 1", b)
			case pol.Algorithm != AlgorithmGCRA && pol.Strategy != StrategyKV:
				p.errorf(v.Line, name, "burst applies only to algorithm gcra and strategy kv")
			}
			pol.Burst = b
		}
	}
	if pol.Burst == 0 && (pol.Algorithm == AlgorithmGCRA || pol.Strategy == StrategyKV) {
		pol.Burst = pol.Limit
	}

	pol.Cost = 1
	if v := fields["cost"]; v != nil {
		if c, ok := p.int(v, name, "cost"); ok {
			switch {
			case c < 1:
				p.errorf(v.Line, name, "cost %d must be at least 1", c)
			case pol.Limit > 0 && c > pol.Capacity():
				what := "limit"
				if pol.Burst > 0 {
					what = "burst"
				}
				p.errorf(v.Line, name, "cost %d is more than the %s %d: every request would be denied", c, what, pol.Capacity())
			}
			pol.Cost = c
		}
	}

	pol.OnStoreError = FailOpen
	if pol.Strategy == StrategyDurable {
		pol.OnStoreError = FailClosed
	}
	if v := fields["on_store_error"]; v != nil {
		if s, ok := p.str(v, name, "on_store_error"); ok {
			switch s {
			case FailOpen, FailClosed:
				pol.OnStoreError = s
			case FailLocal:
				pol.OnStoreError = s
				if pol.Strategy == StrategySigned {
					p.errorf(v.Line, name, "on_store_error local needs a store to fall back from; strategy signed has none")
				}
			default:
				p.errorf(v.Line, name, "on_store_error %q is not one of allow, deny, local", s)
			}
		}
	}

	pol.StoreTimeout = DefaultStoreTimeout
	if v := fields["store_timeout"]; v != nil {
		if d, ok := p.duration(v, name, "store_timeout"); ok {
			if d > 30*time.Second {
				p.errorf(v.Line, name, "store_timeout %s is longer than 30s; a limiter must answer faster than the request it guards", d)
			}
			pol.StoreTimeout = d
		}
	}

	if v := fields["shadow"]; v != nil {
		pol.Shadow, _ = p.bool(v, name, "shadow")
	}
	if v := fields["deny_cache"]; v != nil {
		if b, ok := p.bool(v, name, "deny_cache"); ok {
			pol.DenyCache = b
		}
		if pol.Strategy != StrategyDurable && pol.Strategy != "" {
			p.errorf(v.Line, name, "deny_cache applies only to strategy durable")
		}
	}

	usesIP := pol.Key.Kind == KeyIP || pol.OnMissingKey == MissingKeyIP
	if v := fields["trusted_proxies"]; v != nil {
		if t, ok := p.int(v, name, "trusted_proxies"); ok {
			switch {
			case t < 0 || t > 16:
				p.errorf(v.Line, name, "trusted_proxies %d must be between 0 and 16", t)
			case !usesIP:
				p.errorf(v.Line, name, "trusted_proxies applies only when the key is ip or falls back to ip")
			}
			pol.TrustedProxies = int(t)
		}
	}
	pol.IPv6Prefix = 64
	if v := fields["ipv6_prefix"]; v != nil {
		if t, ok := p.int(v, name, "ipv6_prefix"); ok {
			switch {
			case t < 16 || t > 128:
				p.errorf(v.Line, name, "ipv6_prefix %d must be between 16 and 128", t)
			case !usesIP:
				p.errorf(v.Line, name, "ipv6_prefix applies only when the key is ip or falls back to ip")
			}
			pol.IPv6Prefix = int(t)
		}
	}

	pol.Shards = 1
	if v := fields["shards"]; v != nil {
		if s, ok := p.int(v, name, "shards"); ok {
			switch {
			case s < 1 || s > 1000:
				p.errorf(v.Line, name, "shards %d must be between 1 and 1000", s)
			case pol.Strategy != StrategyDurable:
				p.errorf(v.Line, name, "shards applies only to strategy durable")
			case s > 1 && pol.Limit > 0 && s > pol.Limit:
				p.errorf(v.Line, name, "shards %d is more than the limit %d; each shard needs at least one unit", s, pol.Limit)
			}
			pol.Shards = int(s)
		}
	}
	if v := fields["sync_interval"]; v != nil {
		if d, ok := p.duration(v, name, "sync_interval"); ok {
			if pol.Strategy != StrategyKV {
				p.errorf(v.Line, name, "sync_interval applies only to strategy kv")
			}
			pol.SyncInterval = d
		}
	}
	if v := fields["proof_of_work"]; v != nil {
		pol.ProofOfWork = p.proofOfWork(v, name)
		if pol.Strategy != StrategySigned {
			p.errorf(v.Line, name, "proof_of_work applies only to strategy signed")
		}
	}
	return pol
}

func (p *fileParser) proofOfWork(v *yaml.Node, name string) *ProofOfWork {
	pw := &ProofOfWork{Bits: 16, TTL: 10 * time.Second}
	if v.Kind != yaml.MappingNode {
		p.errorf(v.Line, name, "proof_of_work must be a mapping, like {bits: 16, ttl: 10s}")
		return pw
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, fv := v.Content[i], v.Content[i+1]
		switch k.Value {
		case "bits":
			if b, ok := p.int(fv, name, "proof_of_work.bits"); ok {
				if b < 1 || b > 32 {
					p.errorf(fv.Line, name, "proof_of_work.bits %d must be between 1 and 32 (each bit doubles the client's work)", b)
				}
				pw.Bits = int(b)
			}
		case "ttl":
			if d, ok := p.duration(fv, name, "proof_of_work.ttl"); ok {
				if d > 10*time.Minute {
					p.errorf(fv.Line, name, "proof_of_work.ttl %s is longer than 10m", d)
				}
				pw.TTL = d
			}
		default:
			p.errorf(k.Line, name, "unknown field proof_of_work.%s%s", k.Value, suggest(k.Value, []string{"bits", "ttl"}))
		}
	}
	return pw
}

func (p *fileParser) routes(v *yaml.Node, name string) []Route {
	var items []*yaml.Node
	switch v.Kind {
	case yaml.SequenceNode:
		items = v.Content
	case yaml.ScalarNode:
		items = []*yaml.Node{v}
	default:
		p.errorf(v.Line, name, "routes must be a list, like [\"GET /paid/*\"]")
		return nil
	}
	if len(items) == 0 {
		p.errorf(v.Line, name, "routes is empty")
	}
	var out []Route
	var written []string
	for _, it := range items {
		s, ok := p.str(it, name, "routes")
		if !ok {
			continue
		}
		r, err := ParseRoute(s)
		if err != nil {
			p.errorf(it.Line, name, "%s", strings.TrimPrefix(err.Error(), "edgelimit: "))
			continue
		}
		if j := slices.Index(out, r); j >= 0 {
			// The same route twice, perhaps spelt differently ("/a" and
			// "/a/"): a mistake, most likely for another route.
			p.errorf(it.Line, name, "route %q is listed twice (it matches what %q does)", s, written[j])
			continue
		}
		out, written = append(out, r), append(written, s)
	}
	return out
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
	d, err := ParseDuration(v.Value)
	if err != nil {
		p.errorf(v.Line, policy, "%s %s", field, strings.TrimPrefix(err.Error(), "edgelimit: "))
		return 0, false
	}
	return d, true
}

// ParseDuration parses a positive duration as time.ParseDuration does, and
// also whole days ("1d"). A bare number is an error that says which unit to add.
func ParseDuration(s string) (time.Duration, error) {
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

// FormatDuration writes d compactly (1d, 24h, 1m30s) for tables and docs.
func FormatDuration(d time.Duration) string {
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
