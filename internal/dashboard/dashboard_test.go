package dashboard

import (
	"os"
	"strings"
	"testing"
)

// Load reads the repository's template: six widgets in the grid, the
// metric ones SEARCH expressions, the alarm's query and numbers, and the
// parameters substituted (defaults, or what the caller passes).
func TestLoadTheTemplate(t *testing.T) {
	data, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Load(data, map[string]string{"MetricsNamespace": "probe"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Condition == "" {
		t.Error("the dashboard and alarm have no condition")
	}
	var metricWidgets, alarmWidgets, insightWidgets int
	for _, w := range d.Widgets {
		if w.Width <= 0 || w.Height <= 0 || w.X < 0 || w.X+w.Width > 24 {
			t.Errorf("widget %q: x %d width %d height %d outside the 24-column grid", w.Title, w.X, w.Width, w.Height)
		}
		switch w.Type {
		case "metric":
			metricWidgets++
			if w.Insight != nil {
				insightWidgets++
				if w.Insight.RuleName != d.Rule.Name || w.Period != 60 {
					t.Errorf("widget %q graphs rule %q every %d s, want %q every 60 s", w.Title, w.Insight.RuleName, w.Period, d.Rule.Name)
				}
				continue
			}
			if len(w.Searches) == 0 {
				t.Errorf("widget %q has no SEARCH", w.Title)
			}
			for _, s := range w.Searches {
				if s.Namespace != "probe" {
					t.Errorf("widget %q searches namespace %q, want the parameter's value", w.Title, s.Namespace)
				}
			}
		case "alarm":
			alarmWidgets++
			if len(w.Alarms) != 1 || w.Alarms[0] != d.Alarm.ARN {
				t.Errorf("alarm widget lists %v, want [%s]", w.Alarms, d.Alarm.ARN)
			}
		}
	}
	if metricWidgets < 5 || alarmWidgets != 1 || insightWidgets != 1 {
		t.Errorf("%d metric, %d alarm and %d rule widgets, want at least 5, 1 and 1", metricWidgets, alarmWidgets, insightWidgets)
	}
	if r := d.Rule; r.Name != StackName+"-edgelimit-top-denied-keys" || r.State != "ENABLED" || len(r.Body.LogGroupNames) != 4 ||
		!strings.HasPrefix(r.Body.LogGroupNames[0], "/aws/lambda/"+StackName+"-") {
		t.Errorf("rule %+v", r)
	}
	a := d.Alarm
	if a.Namespace != "probe" || a.Period != 60 || a.Threshold <= 0 || a.EvaluationPeriods < a.DatapointsToAlarm || a.DatapointsToAlarm < 1 ||
		!strings.HasPrefix(a.Name, StackName) {
		t.Errorf("alarm %+v", a)
	}
}
