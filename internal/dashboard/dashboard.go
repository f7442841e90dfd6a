// Package dashboard reads the CloudWatch dashboard and the store-errors
// alarm that template.yaml declares, and evaluates their metric queries over
// the EMF lines that package metrics writes. e2e checks the template against
// the code with it; bench/dashmock renders docs/dashboard.png with it, widget
// for widget, from the lines of a local run.
//
// It understands what the template uses and nothing more: metric widgets
// whose metrics are SEARCH expressions over one namespace and dimension set
// with a statistic of Sum, Average, Minimum, Maximum, SampleCount or pNN, a
// horizontal annotation, alarm widgets, and an alarm on a Metrics Insights
// query `SELECT SUM(metric) FROM SCHEMA("namespace", dimensions...)`, and
// a Contributor Insights rule (JSON logs, Count or Sum) with the metric
// widget that graphs its top contributors.
package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Logical ids of the resources in template.yaml.
const (
	DashboardID = "Dashboard"
	AlarmID     = "StoreErrorsAlarm"
)

// Dashboard is the template's dashboard and alarm, parameters substituted.
type Dashboard struct {
	// Condition is the condition both resources are created under.
	Condition string
	Widgets   []Widget
	Alarm     Alarm
	// Rule is the Contributor Insights rule (RuleID), under the same
	// condition.
	Rule InsightRule
}

// Widget is one widget of the dashboard, in its grid of 24 columns.
type Widget struct {
	Type                string // "metric" or "alarm"
	X, Y, Width, Height int
	Title               string
	// Searches are a metric widget's SEARCH expressions.
	Searches []Search
	// YLabel is the left axis's label; YMin its minimum, if set.
	YLabel string
	YMin   *float64
	// Horizontal are the values of its horizontal annotations, by label.
	Horizontal map[string]float64
	// Alarms are an alarm widget's alarm ARNs.
	Alarms []string
	// Insight is set for a metric widget that graphs the rule's top
	// contributors (its insightRule), over periods of Period seconds.
	Insight *InsightWidget
	Period  int
}

// Search is a SEARCH('{namespace,dims...} MetricName="name"', 'stat', period).
type Search struct {
	Expression string
	Namespace  string
	Dimensions []string
	Metric     string
	Stat       string
	Period     int
}

// Alarm is the store-errors alarm.
type Alarm struct {
	Name              string
	ARN               string // the placeholder ARN the dashboard refers to
	Metric            string // the SUM()'d metric of its query
	Namespace         string
	Dimensions        []string
	Period            int
	Threshold         float64
	Comparison        string
	EvaluationPeriods int
	DatapointsToAlarm int
	// Actions says whether it notifies (AlarmActions is set).
	Actions bool
}

// Pseudo parameters as Load substitutes them.
const (
	Region    = "us-east-1"
	StackName = "example"
	AccountID = "123456789012"
)

var (
	searchRe = regexp.MustCompile(`^SEARCH\('\{"?([^",}]+)"?((?:,[A-Za-z]+)*)\} MetricName="([A-Za-z]+)"', '([A-Za-z0-9.]+)', ([0-9]+)\)$`)
	schemaRe = regexp.MustCompile(`^SELECT SUM\(([A-Za-z]+)\) FROM SCHEMA\("([^"]+)"((?:, ?[A-Za-z]+)*)\)$`)
	subRe    = regexp.MustCompile(`\$\{([^}!]+)\}`)
)

// ParseSearch parses one SEARCH expression of the form the template uses.
func ParseSearch(expr string) (Search, error) {
	m := searchRe.FindStringSubmatch(expr)
	if m == nil {
		return Search{}, fmt.Errorf("dashboard: %q is not SEARCH('{namespace,dimensions} MetricName=\"name\"', 'stat', period)", expr)
	}
	period, _ := strconv.Atoi(m[5])
	s := Search{Expression: expr, Namespace: m[1], Dimensions: splitDims(m[2]), Metric: m[3], Stat: m[4], Period: period}
	if _, err := StatOf(s.Stat); err != nil {
		return Search{}, err
	}
	return s, nil
}

func splitDims(s string) []string {
	var dims []string
	for _, d := range strings.Split(s, ",") {
		if d = strings.TrimSpace(d); d != "" {
			dims = append(dims, d)
		}
	}
	return dims
}

// Load reads the dashboard and the alarm from a template. params override
// the parameters' defaults; pseudo parameters are Region, StackName and
// AccountID, and ${Resource.Arn} of the alarm is its ARN.
func Load(template []byte, params map[string]string) (*Dashboard, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(template, &doc); err != nil {
		return nil, fmt.Errorf("dashboard: template: %w", err)
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("dashboard: empty template")
	}
	root := doc.Content[0]
	values := map[string]string{"AWS::Region": Region, "AWS::StackName": StackName, "AWS::AccountId": AccountID}
	for name, p := range entries(get(root, "Parameters")) {
		if def := get(p, "Default"); def != nil {
			values[name] = def.Value
		}
	}
	for k, v := range params {
		values[k] = v
	}
	res := get(root, "Resources")
	// A log group's Ref is its name.
	for name, r := range entries(res) {
		if get(r, "Type").Value == "AWS::Logs::LogGroup" {
			if v, err := scalar(get(r, "Properties", "LogGroupName"), values); err == nil {
				values[name] = v
			}
		}
	}
	an, dn := get(res, AlarmID), get(res, DashboardID)
	if an == nil || dn == nil {
		return nil, fmt.Errorf("dashboard: template has no %s or %s", DashboardID, AlarmID)
	}
	if t := get(an, "Type").Value; t != "AWS::CloudWatch::Alarm" {
		return nil, fmt.Errorf("dashboard: %s is a %s", AlarmID, t)
	}
	if t := get(dn, "Type").Value; t != "AWS::CloudWatch::Dashboard" {
		return nil, fmt.Errorf("dashboard: %s is a %s", DashboardID, t)
	}
	d := &Dashboard{Condition: get(dn, "Condition").Value}
	if c := get(an, "Condition").Value; c != d.Condition {
		return nil, fmt.Errorf("dashboard: the alarm's condition %q is not the dashboard's %q", c, d.Condition)
	}

	// The alarm first: the dashboard refers to its ARN.
	ap := get(an, "Properties")
	var err error
	a := &d.Alarm
	if a.Name, err = scalar(get(ap, "AlarmName"), values); err != nil {
		return nil, err
	}
	a.ARN = "arn:aws:cloudwatch:" + Region + ":" + AccountID + ":alarm:" + a.Name
	values[AlarmID+".Arn"] = a.ARN
	ms := get(ap, "Metrics")
	if ms == nil || len(ms.Content) != 1 {
		return nil, errors.New("dashboard: the alarm must have one metric query")
	}
	q, err := scalar(get(ms.Content[0], "Expression"), values)
	if err != nil {
		return nil, err
	}
	m := schemaRe.FindStringSubmatch(q)
	if m == nil {
		return nil, fmt.Errorf("dashboard: alarm query %q is not SELECT SUM(metric) FROM SCHEMA(\"namespace\", dimensions)", q)
	}
	a.Metric, a.Namespace, a.Dimensions = m[1], m[2], splitDims(m[3])
	for _, f := range []struct {
		key string
		dst *int
	}{{"EvaluationPeriods", &a.EvaluationPeriods}, {"DatapointsToAlarm", &a.DatapointsToAlarm}} {
		if *f.dst, err = number(get(ap, f.key), values); err != nil {
			return nil, fmt.Errorf("dashboard: alarm %s: %w", f.key, err)
		}
	}
	if a.Period, err = number(get(ms.Content[0], "Period"), values); err != nil {
		return nil, fmt.Errorf("dashboard: alarm Period: %w", err)
	}
	th, err := scalar(get(ap, "Threshold"), values)
	if err != nil {
		return nil, err
	}
	if a.Threshold, err = strconv.ParseFloat(th, 64); err != nil {
		return nil, fmt.Errorf("dashboard: alarm Threshold %q: %w", th, err)
	}
	a.Comparison = get(ap, "ComparisonOperator").Value
	a.Actions = get(ap, "AlarmActions") != nil

	if err := loadRule(d, get(res, RuleID), values); err != nil {
		return nil, err
	}

	body := get(dn, "Properties", "DashboardBody")
	text, err := scalar(body, values)
	if err != nil {
		return nil, err
	}
	var raw struct {
		Widgets []struct {
			Type                string `json:"type"`
			X, Y, Width, Height int
			Properties          struct {
				Title       string              `json:"title"`
				Metrics     [][]json.RawMessage `json:"metrics"`
				InsightRule *InsightWidget      `json:"insightRule"`
				Period      int                 `json:"period"`
				Alarms      []string            `json:"alarms"`
				YAxis       struct {
					Left struct {
						Min   *float64 `json:"min"`
						Label string   `json:"label"`
					} `json:"left"`
				} `json:"yAxis"`
				Annotations struct {
					Horizontal []struct {
						Label string  `json:"label"`
						Value float64 `json:"value"`
					} `json:"horizontal"`
				} `json:"annotations"`
			} `json:"properties"`
		} `json:"widgets"`
	}
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf("dashboard: DashboardBody is not JSON: %w", err)
	}
	for i, rw := range raw.Widgets {
		p := rw.Properties
		w := Widget{Type: rw.Type, X: rw.X, Y: rw.Y, Width: rw.Width, Height: rw.Height, Title: p.Title,
			YLabel: p.YAxis.Left.Label, YMin: p.YAxis.Left.Min, Alarms: p.Alarms, Insight: p.InsightRule, Period: p.Period}
		if w.Insight != nil {
			switch iw := w.Insight; {
			case len(p.Metrics) > 0:
				return nil, fmt.Errorf("dashboard: widget %d (%s): a widget graphs metrics or a rule, not both", i, p.Title)
			case iw.RuleName != d.Rule.Name:
				return nil, fmt.Errorf("dashboard: widget %d (%s) graphs rule %q, not the template's %q", i, p.Title, iw.RuleName, d.Rule.Name)
			case iw.MaxContributorCount < 1 || iw.MaxContributorCount > 100:
				return nil, fmt.Errorf("dashboard: widget %d (%s): maxContributorCount %d is not 1 to 100", i, p.Title, iw.MaxContributorCount)
			case iw.OrderBy != "Sum":
				return nil, fmt.Errorf("dashboard: widget %d (%s): orderBy %q: only Sum is evaluated here", i, p.Title, iw.OrderBy)
			case p.Period < 60 || p.Period%60 != 0:
				return nil, fmt.Errorf("dashboard: widget %d (%s): period %d is not whole minutes", i, p.Title, p.Period)
			}
		}
		for _, h := range p.Annotations.Horizontal {
			if w.Horizontal == nil {
				w.Horizontal = map[string]float64{}
			}
			w.Horizontal[h.Label] = h.Value
		}
		for _, row := range p.Metrics {
			if len(row) != 1 {
				return nil, fmt.Errorf("dashboard: widget %d (%s): a metrics row must be one expression", i, p.Title)
			}
			var e struct {
				Expression string `json:"expression"`
			}
			if err := json.Unmarshal(row[0], &e); err != nil || e.Expression == "" {
				return nil, fmt.Errorf("dashboard: widget %d (%s): a metrics row must be an expression object", i, p.Title)
			}
			s, err := ParseSearch(e.Expression)
			if err != nil {
				return nil, fmt.Errorf("dashboard: widget %d (%s): %w", i, p.Title, err)
			}
			w.Searches = append(w.Searches, s)
		}
		d.Widgets = append(d.Widgets, w)
	}
	sort.SliceStable(d.Widgets, func(i, j int) bool {
		if d.Widgets[i].Y != d.Widgets[j].Y {
			return d.Widgets[i].Y < d.Widgets[j].Y
		}
		return d.Widgets[i].X < d.Widgets[j].X
	})
	return d, nil
}

// scalar returns a scalar, a !Sub with its ${...} substituted, or a !Ref.
func scalar(n *yaml.Node, values map[string]string) (string, error) {
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", errors.New("dashboard: expected a scalar, !Ref or !Sub")
	}
	switch n.Tag {
	case "!Ref":
		v, ok := values[n.Value]
		if !ok {
			return "", fmt.Errorf("dashboard: !Ref %s: no such parameter", n.Value)
		}
		return v, nil
	case "!Sub":
		var missing []string
		out := subRe.ReplaceAllStringFunc(n.Value, func(s string) string {
			name := s[2 : len(s)-1]
			v, ok := values[name]
			if !ok {
				missing = append(missing, name)
			}
			return v
		})
		if missing != nil {
			return "", fmt.Errorf("dashboard: !Sub refers to %s, which Load does not know", strings.Join(missing, ", "))
		}
		return strings.ReplaceAll(out, "${!", "${"), nil
	}
	return n.Value, nil
}

func number(n *yaml.Node, values map[string]string) (int, error) {
	s, err := scalar(n, values)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

func get(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

func entries(n *yaml.Node) map[string]*yaml.Node {
	m := map[string]*yaml.Node{}
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = n.Content[i+1]
		}
	}
	return m
}

// loadRule reads the Contributor Insights rule n into d.Rule and makes its
// name known to the dashboard body (${RuleID.RuleName}).
func loadRule(d *Dashboard, n *yaml.Node, values map[string]string) error {
	if n == nil {
		return fmt.Errorf("dashboard: template has no %s", RuleID)
	}
	if t := get(n, "Type").Value; t != "AWS::CloudWatch::InsightRule" {
		return fmt.Errorf("dashboard: %s is a %s", RuleID, t)
	}
	r := &d.Rule
	if r.Condition = get(n, "Condition").Value; r.Condition != d.Condition {
		return fmt.Errorf("dashboard: the rule's condition %q is not the dashboard's %q", r.Condition, d.Condition)
	}
	p := get(n, "Properties")
	var err error
	if r.Name, err = scalar(get(p, "RuleName"), values); err != nil {
		return fmt.Errorf("dashboard: rule RuleName: %w", err)
	}
	if r.State, err = scalar(get(p, "RuleState"), values); err != nil {
		return fmt.Errorf("dashboard: rule RuleState: %w", err)
	}
	if r.State != "ENABLED" && r.State != "DISABLED" {
		return fmt.Errorf("dashboard: rule RuleState %q is not ENABLED or DISABLED", r.State)
	}
	body, err := scalar(get(p, "RuleBody"), values)
	if err != nil {
		return fmt.Errorf("dashboard: rule RuleBody: %w", err)
	}
	if r.Body, err = ParseRuleBody(body); err != nil {
		return err
	}
	values[RuleID+".RuleName"] = r.Name
	return nil
}
