package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

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
