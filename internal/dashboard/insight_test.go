package dashboard

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

const topRule = `{
  "Schema": {"Name": "CloudWatchLogRule", "Version": 1},
  "LogGroupNames": ["/aws/lambda/x-paid"],
  "LogFormat": "JSON",
  "Contribution": {
    "Keys": ["$.Policy", "$.KeyHash"],
    "Filters": [{"Match": "$.Denied", "EqualTo": 1}, {"Match": "$.KeyHash", "IsPresent": true}]
  },
  "AggregateOn": "Count"
}`

// TestRuleTopCountsDenialsPerKey: the rule over what package metrics
// writes counts each (policy, key) pair's denials per period and ranks the
// pairs by their total; admissions and lines without a key count nothing.
func TestRuleTopCountsDenialsPerKey(t *testing.T) {
	b, err := ParseRuleBody(topRule)
	if err != nil {
		t.Fatal(err)
	}
	const k1, k2 = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"
	at := []time.Duration{0, 5 * time.Second, 10 * time.Second, 61 * time.Second, 62 * time.Second, 63 * time.Second, 64 * time.Second}
	evs := []edgelimit.Event{
		{Policy: "paid", Key: k1},
		{Policy: "paid", Key: k1, Allowed: true},
		{Policy: "search", Key: k1},
		{Policy: "paid", Key: k2},
		{Policy: "paid", Key: k2},
		{Policy: "paid", Key: k1},
		{Policy: "blocked", Reason: "deny-list"}, // no key
	}
	points, err := ReadEMF(emfLines(t, at, evs))
	if err != nil {
		t.Fatal(err)
	}
	top := b.Top(points, t0, t0.Add(2*time.Minute), time.Minute, 10)
	var got []string
	for _, c := range top {
		got = append(got, c.Label+"="+mustJSON(c.Values))
	}
	want := []string{"paid · " + k1 + "=[1,1]", "paid · " + k2 + "=[null,2]", "search · " + k1 + "=[1,null]"}
	if !slices.Equal(got, want) {
		t.Errorf("top = %v, want %v", got, want)
	}
	if two := b.Top(points, t0, t0.Add(2*time.Minute), time.Minute, 2); len(two) != 2 || two[0].Total != 2 || two[1].Total != 2 {
		t.Errorf("top 2 = %+v", two)
	}
}

// mustJSON writes values with NaN as null.
func mustJSON(v []float64) string {
	out := make([]any, len(v))
	for i, x := range v {
		if !math.IsNaN(x) {
			out[i] = x
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// TestParseRuleBodyRefusesWhatTheSyntaxDoesNot: the rule syntax's limits.
func TestParseRuleBodyRefusesWhatTheSyntaxDoesNot(t *testing.T) {
	for name, edit := range map[string][2]string{
		"schema":              {`"Version": 1`, `"Version": 2`},
		"log format":          {`"LogFormat": "JSON"`, `"LogFormat": "XML"`},
		"no log groups":       {`["/aws/lambda/x-paid"]`, `[]`},
		"wildcard inside":     {`/aws/lambda/x-paid`, `/aws/*/x-paid`},
		"five keys":           {`"$.Policy", "$.KeyHash"`, `"$.a", "$.b", "$.c", "$.d", "$.e"`},
		"bad path":            {`"$.Policy"`, `"Policy"`},
		"two operators":       {`"EqualTo": 1}`, `"EqualTo": 1, "GreaterThan": 0}`},
		"no operator":         {`, "EqualTo": 1}`, `}`},
		"unknown field":       {`"AggregateOn"`, `"Extra": 1, "AggregateOn"`},
		"sum without ValueOf": {`"AggregateOn": "Count"`, `"AggregateOn": "Sum"`},
		"ValueOf with count":  {`"Filters"`, `"ValueOf": "$.StoreLatency", "Filters"`},
		"non-ASCII":           {`x-paid`, `x-pαid`},
	} {
		body := strings.Replace(topRule, edit[0], edit[1], 1)
		if body == topRule {
			t.Fatalf("%s: edit %q not found", name, edit[0])
		}
		if _, err := ParseRuleBody(body); err == nil {
			t.Errorf("%s: ParseRuleBody accepted\n%s", name, body)
		}
	}
}

// TestRuleFilters: every operator of the syntax, on what a line holds.
func TestRuleFilters(t *testing.T) {
	line := map[string]json.RawMessage{"Policy": json.RawMessage(`"paid-daily"`), "Denied": json.RawMessage(`1`),
		"_aws": json.RawMessage(`{"CloudWatchMetrics":[{"Namespace":"edgelimit"}]}`)}
	for f, want := range map[string]bool{
		`{"Match": "$.Policy", "In": ["paid-daily", "x"]}`:                        true,
		`{"Match": "$.Policy", "NotIn": ["paid-daily"]}`:                          false,
		`{"Match": "$.Policy", "StartsWith": ["paid-"]}`:                          true,
		`{"Match": "$.Denied", "GreaterThan": 0}`:                                 true,
		`{"Match": "$.Denied", "LessThan": 1}`:                                    false,
		`{"Match": "$.Denied", "EqualTo": 1}`:                                     true,
		`{"Match": "$.Denied", "NotEqualTo": 1}`:                                  false,
		`{"Match": "$.KeyHash", "IsPresent": true}`:                               false,
		`{"Match": "$.KeyHash", "IsPresent": false}`:                              true,
		`{"Match": "$._aws.CloudWatchMetrics[0].Namespace", "In": ["edgelimit"]}`: true,
		`{"Match": "$.Policy", "EqualTo": 1}`:                                     false,
	} {
		b, err := ParseRuleBody(strings.Replace(topRule, `{"Match": "$.Denied", "EqualTo": 1}, {"Match": "$.KeyHash", "IsPresent": true}`, f, 1))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if got := b.Matches(line); got != want {
			t.Errorf("%s: matches %v, want %v", f, got, want)
		}
	}
}
