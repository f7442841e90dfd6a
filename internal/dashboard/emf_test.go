package dashboard

import (
	"bytes"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/metrics"
)

var t0 = time.Unix(1_700_000_000, 0).UTC().Truncate(time.Minute)

// emfLines writes events through package metrics, each at its instant, with
// a log line between them as a function's output has.
func emfLines(t *testing.T, at []time.Duration, evs []edgelimit.Event) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	var now time.Time
	m, err := metrics.NewEMF(metrics.EMFConfig{Writer: &buf, Function: "paid", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		now = t0.Add(at[i])
		m.Observe(ev)
		buf.WriteString(`{"level":"INFO","message":"not a metric"}` + "\n")
	}
	return &buf
}

func TestEvaluateReadsWhatPackageMetricsWrites(t *testing.T) {
	storeErr := errors.New("timeout")
	at := []time.Duration{0, 10 * time.Second, 20 * time.Second, 70 * time.Second, 190 * time.Second}
	evs := []edgelimit.Event{
		{Policy: "paid-daily", Route: "GET /paid/*", Allowed: true, Latency: 4 * time.Millisecond},
		{Policy: "paid-daily", Route: "GET /paid/*", Allowed: true, Latency: 8 * time.Millisecond},
		{Policy: "paid-burst", Route: "GET /paid/*", Allowed: false, Latency: 2 * time.Millisecond},
		{Policy: "paid-daily", Route: "GET /paid/*", Degraded: true, StoreError: storeErr, Latency: 100 * time.Millisecond},
		{Policy: "paid-daily", Route: "GET /paid/*", Allowed: true, Latency: 5 * time.Millisecond},
	}
	points, err := ReadEMF(emfLines(t, at, evs))
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != len(evs) {
		t.Fatalf("%d points, want %d (one per EMF line, log lines skipped)", len(points), len(evs))
	}
	search := func(metric, stat string) []Series {
		t.Helper()
		s, err := ParseSearch(`SEARCH('{"edgelimit",Policy,Route} MetricName="` + metric + `"', '` + stat + `', 60)`)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Evaluate(s, points, t0, t0.Add(4*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	nan := math.NaN()
	for _, tc := range []struct {
		metric, stat string
		want         map[string][]float64
	}{
		{"Allowed", "Sum", map[string][]float64{"paid-burst · GET /paid/*": {0, nan, nan, nan}, "paid-daily · GET /paid/*": {2, 0, nan, 1}}},
		{"Denied", "Sum", map[string][]float64{"paid-burst · GET /paid/*": {1, nan, nan, nan}, "paid-daily · GET /paid/*": {0, 1, nan, 0}}},
		{"StoreErrors", "Sum", map[string][]float64{"paid-burst · GET /paid/*": {0, nan, nan, nan}, "paid-daily · GET /paid/*": {0, 1, nan, 0}}},
		{"StoreLatency", "p99", map[string][]float64{"paid-burst · GET /paid/*": {2, nan, nan, nan}, "paid-daily · GET /paid/*": {8, 100, nan, 5}}},
		{"StoreLatency", "p50", map[string][]float64{"paid-daily · GET /paid/*": {4, 100, nan, 5}}},
	} {
		got := map[string][]float64{}
		for _, s := range search(tc.metric, tc.stat) {
			got[s.Label] = s.Values
		}
		for label, want := range tc.want {
			if !sameFloats(got[label], want) {
				t.Errorf("%s %s %q = %v, want %v", tc.metric, tc.stat, label, got[label], want)
			}
		}
	}
}

func sameFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !(math.IsNaN(a[i]) && math.IsNaN(b[i])) {
			return false
		}
	}
	return true
}

// Two breaching minutes of five raise the alarm; it clears once fewer than
// two of the last five breach.
func TestAlarmEvaluate(t *testing.T) {
	var at []time.Duration
	var evs []edgelimit.Event
	errs := []int{0, 6, 1, 5, 0, 0, 0, 0, 0, 0}
	for minute, n := range errs {
		for i := 0; i < n; i++ {
			at = append(at, time.Duration(minute)*time.Minute+time.Duration(i)*time.Second)
			evs = append(evs, edgelimit.Event{Policy: "search", Route: "GET /search", Degraded: true, StoreError: errors.New("x")})
		}
		at = append(at, time.Duration(minute)*time.Minute+59*time.Second)
		evs = append(evs, edgelimit.Event{Policy: "contact", Route: "POST /contact", Allowed: true})
	}
	points, err := ReadEMF(emfLines(t, at, evs))
	if err != nil {
		t.Fatal(err)
	}
	a := Alarm{Name: "x", Metric: "StoreErrors", Namespace: "edgelimit", Dimensions: []string{"Policy", "Route"}, Period: 60,
		Threshold: 5, Comparison: "GreaterThanOrEqualToThreshold", EvaluationPeriods: 5, DatapointsToAlarm: 2}
	values, alarms, err := a.Evaluate(points, t0, t0.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range errs {
		if values[i] != float64(want) {
			t.Errorf("minute %d: %v store errors, want %d", i, values[i], want)
		}
	}
	// Breaches in minutes 1 and 3: ALARM from the end of minute 3 until the
	// end of minute 6, when minute 1 has left the five-minute window.
	want := []Interval{{t0.Add(4 * time.Minute), t0.Add(7 * time.Minute)}}
	if len(alarms) != 1 || !alarms[0].From.Equal(want[0].From) || !alarms[0].To.Equal(want[0].To) {
		t.Errorf("alarms = %v, want %v", alarms, want)
	}
}

func TestParseSearchRefusesOtherShapes(t *testing.T) {
	for _, tc := range []struct {
		expr string
		ok   bool
	}{
		{`SEARCH('{edgelimit,Policy,Route} MetricName="Allowed"', 'Sum', 60)`, true}, // unquoted namespace
		{`SEARCH('{"edgelimit",Policy} MetricName="Allowed"', 'Median', 60)`, false},
		{`METRICS()`, false},
		{`SEARCH('edgelimit Allowed', 'Sum', 60)`, false},
	} {
		if _, err := ParseSearch(tc.expr); (err == nil) != tc.ok {
			t.Errorf("ParseSearch(%s) = %v, want ok %v", tc.expr, err, tc.ok)
		}
	}
}
