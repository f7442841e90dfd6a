package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/dashboard"
	"github.com/edgelimit/edgelimit/metrics"
)

// TestTemplateDashboardShowsTheMetricsTheCodeWrites: the dashboard and the
// alarm of template.yaml query what package metrics writes — the namespace
// the functions are given (MetricsNamespace), the one dimension set
// (Policy, Route), metric names the code emits — and show allowed, denied,
// degraded, store latency and store errors; the alarm sums StoreErrors over
// every policy and route, and the dashboard shows its threshold and state.
// Both exist only while metrics are on.
func TestTemplateDashboardShowsTheMetricsTheCodeWrites(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(t), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const ns = "probe-namespace"
	d, err := dashboard.Load(data, map[string]string{"MetricsNamespace": ns})
	if err != nil {
		t.Fatal(err)
	}
	c := loadTemplate(t)
	if got := str(get(c.root, "Globals", "Function", "Environment", "Variables", "EDGELIMIT_METRICS_NAMESPACE")); got != "!Ref MetricsNamespace" {
		t.Fatalf("the functions' EDGELIMIT_METRICS_NAMESPACE is %q, not the MetricsNamespace the dashboard reads", got)
	}
	// The condition is "metrics on": MetricsNamespace is not setup's "off".
	cond := get(c.root, "Conditions", d.Condition)
	if cond == nil || cond.Tag != "!Not" || !strings.Contains(nodeText(cond), "MetricsNamespace") || !strings.Contains(nodeText(cond), "off") {
		t.Errorf("condition %q of the dashboard and alarm is not MetricsNamespace != off", d.Condition)
	}

	emitted := []string{metrics.MetricAllowed, metrics.MetricDenied, metrics.MetricShadowDenied, metrics.MetricDegraded,
		metrics.MetricStoreErrors, metrics.MetricRefunded, metrics.MetricRefundFailed, metrics.MetricStoreLatency}
	dims := []string{metrics.DimensionPolicy, metrics.DimensionRoute}
	shown := map[string]string{} // metric -> statistic
	var thresholdShown bool
	for _, w := range d.Widgets {
		for _, s := range w.Searches {
			if s.Namespace != ns || !slices.Equal(s.Dimensions, dims) {
				t.Errorf("widget %q searches {%s,%s}, want {%s,%s}", w.Title, s.Namespace, strings.Join(s.Dimensions, ","), ns, strings.Join(dims, ","))
			}
			if !slices.Contains(emitted, s.Metric) {
				t.Errorf("widget %q shows %q, which the code does not emit", w.Title, s.Metric)
			}
			shown[s.Metric] = s.Stat
			if s.Metric == d.Alarm.Metric && w.Horizontal["alarm threshold"] == d.Alarm.Threshold {
				thresholdShown = true
			}
		}
	}
	for _, m := range []string{metrics.MetricAllowed, metrics.MetricDenied, metrics.MetricDegraded, metrics.MetricStoreLatency, metrics.MetricStoreErrors} {
		stat, ok := shown[m]
		switch {
		case !ok:
			t.Errorf("the dashboard does not show %s", m)
		case m == metrics.MetricStoreLatency && !strings.HasPrefix(stat, "p"):
			t.Errorf("%s is shown as %s, want a percentile", m, stat)
		case m != metrics.MetricStoreLatency && stat != "Sum":
			t.Errorf("%s (a count per decision) is shown as %s, want Sum", m, stat)
		}
	}
	a := d.Alarm
	if a.Metric != metrics.MetricStoreErrors || a.Namespace != ns || !slices.Equal(a.Dimensions, dims) {
		t.Errorf("the alarm sums %s over {%s,%s}, want %s over {%s,%s}", a.Metric, a.Namespace, strings.Join(a.Dimensions, ","),
			metrics.MetricStoreErrors, ns, strings.Join(dims, ","))
	}
	if !thresholdShown {
		t.Errorf("no widget of %s shows the alarm threshold %v", a.Metric, a.Threshold)
	}
	var stateShown bool
	for _, w := range d.Widgets {
		stateShown = stateShown || w.Type == "alarm" && slices.Contains(w.Alarms, a.ARN)
	}
	if !stateShown {
		t.Error("no alarm widget shows the store-errors alarm")
	}
}

// nodeText is a YAML subtree's scalars, space-separated.
func nodeText(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	parts := []string{n.Value}
	for _, c := range n.Content {
		parts = append(parts, nodeText(c))
	}
	return strings.Join(parts, " ")
}

// TestTemplateTopKeysRuleReadsTheDecisionLines: the Contributor Insights
// rule of template.yaml reads every function's log group (and only
// those), ranks by the fields package metrics writes (Policy and the
// hashed key, a property), counts the denial lines, and the dashboard
// graphs it; over lines the code writes it finds the denied key.
func TestTemplateTopKeysRuleReadsTheDecisionLines(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(t), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.Load(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := loadTemplate(t)
	res := get(c.root, "Resources")
	var groups []string
	for name, r := range entries(res) {
		if str(get(r, "Type")) != "AWS::Serverless::Function" {
			continue
		}
		ref := str(get(r, "Properties", "LoggingConfig", "LogGroup"))
		lg := strings.TrimPrefix(ref, "!Ref ")
		gname := str(get(res, lg, "Properties", "LogGroupName"))
		if lg == ref || !strings.HasPrefix(gname, "!Sub ") {
			t.Fatalf("function %s logs to %q (%q), want a !Ref to a log group of the stack", name, ref, gname)
		}
		groups = append(groups, strings.ReplaceAll(strings.TrimPrefix(gname, "!Sub "), "${AWS::StackName}", dashboard.StackName))
	}
	slices.Sort(groups)
	r := d.Rule
	got := slices.Sorted(slices.Values(r.Body.LogGroupNames))
	if !slices.Equal(got, groups) {
		t.Errorf("the rule reads log groups %v, want the functions' %v", got, groups)
	}
	if want := []string{"$." + metrics.DimensionPolicy, "$." + metrics.PropertyKeyHash}; !slices.Equal(r.Body.Contribution.Keys, want) {
		t.Errorf("the rule's keys are %v, want %v", r.Body.Contribution.Keys, want)
	}
	if str(get(res, dashboard.RuleID, "Properties", "RuleState")) != "!Ref TopDeniedKeys" {
		t.Error("the rule's state is not the TopDeniedKeys parameter")
	}
	// The lines the code writes: one key denied twice, one once, one
	// admitted, a list's denial without a key, and a shadow denial.
	var buf bytes.Buffer
	m, err := metrics.NewEMF(metrics.EMFConfig{Writer: &buf})
	if err != nil {
		t.Fatal(err)
	}
	const k1, k2 = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"
	for _, ev := range []edgelimit.Event{{Policy: "paid-daily", Key: k1}, {Policy: "paid-daily", Key: k1}, {Policy: "paid-daily", Key: k2},
		{Policy: "paid-daily", Key: k2, Allowed: true}, {Policy: "blocked", Reason: "deny-list"}, {Policy: "search", Key: k2, Shadow: true}} {
		m.Observe(ev)
	}
	points, err := dashboard.ReadEMF(&buf)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Minute)
	var top []string
	for _, c := range r.Body.Top(points, now.Add(-time.Minute), now.Add(2*time.Minute), time.Minute, 10) {
		top = append(top, fmt.Sprintf("%s=%g", c.Label, c.Total))
	}
	if want := []string{"paid-daily · " + k1 + "=2", "paid-daily · " + k2 + "=1"}; !slices.Equal(top, want) {
		t.Errorf("the rule over the code's lines: %v, want %v", top, want)
	}
	var shown int
	for _, w := range d.Widgets {
		if w.Insight != nil && w.Insight.RuleName == r.Name {
			shown++
		}
	}
	if shown != 1 || r.Condition != d.Condition {
		t.Errorf("%d widgets graph the rule (want 1); its condition %q, the dashboard's %q", shown, r.Condition, d.Condition)
	}
}
