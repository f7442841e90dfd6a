package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RuleID is the logical id of the Contributor Insights rule in
// template.yaml: the client keys with the most denials, by policy.
const RuleID = "TopDeniedKeysRule"

// InsightRule is the template's Contributor Insights rule, parameters
// substituted.
type InsightRule struct {
	Name      string
	State     string // ENABLED or DISABLED
	Condition string
	Body      RuleBody
}

// RuleBody is a Contributor Insights rule over CloudWatch Logs, as its
// JSON definition spells it ("Contributor Insights rule syntax in
// CloudWatch", CloudWatch User Guide).
type RuleBody struct {
	Schema struct {
		Name    string
		Version int
	}
	LogGroupNames []string
	LogFormat     string
	Contribution  struct {
		Keys    []string
		ValueOf string `json:",omitempty"`
		Filters []Filter
	}
	AggregateOn string
}

// Filter is one of a rule's filters: Match names a log field, and exactly
// one operator says what it must be.
type Filter struct {
	Match      string
	In         []string `json:",omitempty"`
	NotIn      []string `json:",omitempty"`
	StartsWith []string `json:",omitempty"`
	// The numeric operators and IsPresent are pointers: 0 and false are
	// values a filter may compare with.
	GreaterThan *float64 `json:",omitempty"`
	LessThan    *float64 `json:",omitempty"`
	EqualTo     *float64 `json:",omitempty"`
	NotEqualTo  *float64 `json:",omitempty"`
	IsPresent   *bool    `json:",omitempty"`
}

// InsightWidget is a metric widget that graphs a Contributor Insights rule:
// its top MaxContributorCount contributors, ordered by OrderBy.
type InsightWidget struct {
	RuleName            string `json:"ruleName"`
	MaxContributorCount int    `json:"maxContributorCount"`
	OrderBy             string `json:"orderBy"`
}

// The limits of the rule syntax.
const (
	maxRuleBody     = 8192 // the definition's length, ASCII only (PutInsightRule)
	maxRuleKeys     = 4
	maxRuleFilters  = 4
	maxFilterValues = 10
)

// jsonPathRe is the "JSON property format notation" of Keys, ValueOf and
// Match: $ then .name or [index] steps.
var jsonPathRe = regexp.MustCompile(`^\$(?:\.[A-Za-z0-9_-]+(?:\[[0-9]+\])*)+$`)

// ParseRuleBody parses and checks a rule definition against the rule
// syntax: the schema CloudWatchLogRule version 1, log groups, LogFormat
// JSON (CLF is not evaluated here), one to four Keys, at most four
// Filters of one operator each, AggregateOn Count, or Sum with ValueOf,
// JSON paths everywhere, and nothing else.
func ParseRuleBody(text string) (RuleBody, error) {
	var b RuleBody
	if len(text) > maxRuleBody {
		return b, fmt.Errorf("dashboard: rule body is %d bytes, more than %d", len(text), maxRuleBody)
	}
	for i := 0; i < len(text); i++ {
		if text[i] > 0x7f {
			return b, fmt.Errorf("dashboard: rule body has a non-ASCII byte at %d", i)
		}
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return b, fmt.Errorf("dashboard: rule body: %w", err)
	}
	if dec.More() {
		return b, errors.New("dashboard: rule body: more than one JSON value")
	}
	c := b.Contribution
	switch {
	case b.Schema.Name != "CloudWatchLogRule" || b.Schema.Version != 1:
		return b, fmt.Errorf("dashboard: rule Schema %+v is not {Name: CloudWatchLogRule, Version: 1}", b.Schema)
	case len(b.LogGroupNames) == 0:
		return b, errors.New("dashboard: rule has no LogGroupNames")
	case b.LogFormat != "JSON":
		return b, fmt.Errorf("dashboard: rule LogFormat %q: want JSON (the EMF lines are JSON)", b.LogFormat)
	case len(c.Keys) == 0 || len(c.Keys) > maxRuleKeys:
		return b, fmt.Errorf("dashboard: rule has %d Keys, want 1 to %d", len(c.Keys), maxRuleKeys)
	case len(c.Filters) > maxRuleFilters:
		return b, fmt.Errorf("dashboard: rule has %d Filters, at most %d", len(c.Filters), maxRuleFilters)
	case b.AggregateOn != "Count" && b.AggregateOn != "Sum":
		return b, fmt.Errorf("dashboard: rule AggregateOn %q is not Count or Sum", b.AggregateOn)
	case (b.AggregateOn == "Sum") != (c.ValueOf != ""):
		return b, errors.New("dashboard: rule ValueOf goes with AggregateOn Sum, and only with it")
	}
	for _, g := range b.LogGroupNames {
		if g == "" || strings.Contains(strings.TrimSuffix(g, "*"), "*") {
			return b, fmt.Errorf("dashboard: rule log group %q: a name, * only at its end", g)
		}
	}
	paths := slices.Clone(c.Keys)
	if c.ValueOf != "" {
		paths = append(paths, c.ValueOf)
	}
	for i, f := range c.Filters {
		paths = append(paths, f.Match)
		n := 0
		for _, set := range []bool{f.In != nil, f.NotIn != nil, f.StartsWith != nil, f.GreaterThan != nil, f.LessThan != nil,
			f.EqualTo != nil, f.NotEqualTo != nil, f.IsPresent != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return b, fmt.Errorf("dashboard: rule filter %d on %s has %d operators, want one", i, f.Match, n)
		}
		for _, vs := range [][]string{f.In, f.NotIn, f.StartsWith} {
			if vs != nil && (len(vs) == 0 || len(vs) > maxFilterValues) {
				return b, fmt.Errorf("dashboard: rule filter %d on %s has %d values, want 1 to %d", i, f.Match, len(vs), maxFilterValues)
			}
		}
	}
	for _, p := range paths {
		if !jsonPathRe.MatchString(p) {
			return b, fmt.Errorf("dashboard: rule field %q is not a JSON path like $.name", p)
		}
	}
	return b, nil
}

// field returns the value at path ($.a.b[0]) in a line's members, or nil.
func field(fields map[string]json.RawMessage, path string) json.RawMessage {
	steps := strings.Split(strings.TrimPrefix(path, "$."), ".")
	var cur json.RawMessage
	for i, s := range steps {
		name, rest, _ := strings.Cut(s, "[")
		if i == 0 {
			cur = fields[name]
		} else {
			var m map[string]json.RawMessage
			if json.Unmarshal(cur, &m) != nil {
				return nil
			}
			cur = m[name]
		}
		for rest != "" && cur != nil {
			idx, tail, _ := strings.Cut(rest, "]")
			rest = strings.TrimPrefix(tail, "[")
			n, _ := strconv.Atoi(idx)
			var a []json.RawMessage
			if json.Unmarshal(cur, &a) != nil || n >= len(a) {
				return nil
			}
			cur = a[n]
		}
		if cur == nil {
			return nil
		}
	}
	return cur
}

// keyValue is a field as a contributor key: a string's text, or a
// number's or a boolean's JSON.
func keyValue(v json.RawMessage) (string, bool) {
	if v == nil || bytes.Equal(v, []byte("null")) {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, true
	}
	return string(v), v[0] != '{' && v[0] != '['
}

// Matches reports whether a line (its members) passes every filter.
func (b RuleBody) Matches(fields map[string]json.RawMessage) bool {
	for _, f := range b.Contribution.Filters {
		v := field(fields, f.Match)
		if f.IsPresent != nil {
			if (v != nil) != *f.IsPresent {
				return false
			}
			continue
		}
		if v == nil {
			return false
		}
		var num float64
		isNum := json.Unmarshal(v, &num) == nil
		s, _ := keyValue(v)
		ok := true
		switch {
		case f.In != nil:
			ok = slices.Contains(f.In, s)
		case f.NotIn != nil:
			ok = !slices.Contains(f.NotIn, s)
		case f.StartsWith != nil:
			ok = slices.ContainsFunc(f.StartsWith, func(p string) bool { return strings.HasPrefix(s, p) })
		case f.GreaterThan != nil:
			ok = isNum && num > *f.GreaterThan
		case f.LessThan != nil:
			ok = isNum && num < *f.LessThan
		case f.EqualTo != nil:
			ok = isNum && num == *f.EqualTo
		case f.NotEqualTo != nil:
			ok = isNum && num != *f.NotEqualTo
		}
		if !ok {
			return false
		}
	}
	return true
}

// Contributor is one contributor of a rule: its key values and its value
// per period.
type Contributor struct {
	Keys  []string
	Total float64
	Series
}

// Top evaluates the rule over points between start and end in periods:
// each contributor's count of matching lines (or sum of ValueOf) per
// period, and the max contributors with the largest total, largest first
// (ties in key order), as the dashboard's widget graphs them. A line
// missing a key field contributes nothing, as in CloudWatch. Only points
// of lines in the rule's log groups should be given.
func (b RuleBody) Top(points []Point, start, end time.Time, period time.Duration, max int) []Contributor {
	n := int((end.Sub(start) + period - 1) / period)
	by := map[string]*Contributor{}
	for i := range points {
		p := &points[i]
		// Fields is on one Point of each line: a line is one log event.
		if p.Fields == nil || p.Time.Before(start) || !p.Time.Before(end) {
			continue
		}
		if !b.Matches(p.Fields) {
			continue
		}
		keys := make([]string, len(b.Contribution.Keys))
		ok := true
		for j, k := range b.Contribution.Keys {
			keys[j], ok = keyValue(field(p.Fields, k))
			if !ok {
				break
			}
		}
		if !ok {
			continue
		}
		v := 1.0
		if b.AggregateOn == "Sum" {
			if json.Unmarshal(field(p.Fields, b.Contribution.ValueOf), &v) != nil {
				continue
			}
		}
		label := strings.Join(keys, " · ")
		c := by[label]
		if c == nil {
			c = &Contributor{Keys: keys, Series: Series{Label: label, Start: start, Period: period, Values: make([]float64, n)}}
			for j := range c.Values {
				c.Values[j] = math.NaN()
			}
			by[label] = c
		}
		j := int(p.Time.Sub(start) / period)
		if math.IsNaN(c.Values[j]) {
			c.Values[j] = 0
		}
		c.Values[j] += v
		c.Total += v
	}
	out := make([]Contributor, 0, len(by))
	for _, c := range by {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Total != out[j].Total {
			return out[i].Total > out[j].Total
		}
		return out[i].Label < out[j].Label
	})
	return out[:min(max, len(out))]
}
