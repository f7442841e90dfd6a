package dashboard

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Point is one EMF line: its metrics' values under one dimension set.
type Point struct {
	Time       time.Time
	Namespace  string
	Dimensions []string          // the dimension set's names, in order
	Dims       map[string]string // their values
	Values     map[string]float64
	// Fields are the line's members, for a Contributor Insights rule
	// (RuleBody.Top): on the first Point of each line only, since a line
	// is one log event however many dimension sets it has.
	Fields map[string]json.RawMessage
}

// ReadEMF reads the EMF lines of r, skipping every other line (a log mixes
// JSON logs and EMF lines, as a Lambda function's stdout and stderr do). A
// line with several dimension sets or directives yields a Point for each.
func ReadEMF(r io.Reader) ([]Point, error) {
	var points []Point
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), `"_aws"`) {
			continue
		}
		var raw map[string]json.RawMessage
		if json.Unmarshal(line, &raw) != nil {
			continue
		}
		var meta struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name string }
			}
		}
		if json.Unmarshal(raw["_aws"], &meta) != nil {
			continue
		}
		fields := raw
		for _, d := range meta.CloudWatchMetrics {
			values := map[string]float64{}
			for _, m := range d.Metrics {
				var v float64
				if json.Unmarshal(raw[m.Name], &v) == nil {
					values[m.Name] = v
				}
			}
			for _, set := range d.Dimensions {
				dims := map[string]string{}
				for _, name := range set {
					var v string
					_ = json.Unmarshal(raw[name], &v)
					dims[name] = v
				}
				points = append(points, Point{Time: time.UnixMilli(meta.Timestamp).UTC(), Namespace: d.Namespace,
					Dimensions: set, Dims: dims, Values: values, Fields: fields})
				fields = nil
			}
		}
	}
	return points, sc.Err()
}

// Series is one time series of a search: one combination of dimension
// values, one value per period (NaN where no line fell in it).
type Series struct {
	Label  string // the dimension values, joined with " · "
	Dims   map[string]string
	Start  time.Time
	Period time.Duration
	Values []float64
}

// Times returns the start of each period of s.
func (s Series) Times() []time.Time {
	t := make([]time.Time, len(s.Values))
	for i := range t {
		t[i] = s.Start.Add(time.Duration(i) * s.Period)
	}
	return t
}

// Evaluate runs a search over points between start and end (periods
// aligned to start): one Series per combination of dimension values, in
// label order, as CloudWatch draws one line per metric the search finds.
func Evaluate(s Search, points []Point, start, end time.Time) ([]Series, error) {
	stat, err := StatOf(s.Stat)
	if err != nil {
		return nil, err
	}
	period := time.Duration(s.Period) * time.Second
	n := int((end.Sub(start) + period - 1) / period)
	samples := map[string][][]float64{}
	dims := map[string]map[string]string{}
	for _, p := range points {
		v, ok := p.Values[s.Metric]
		if !ok || p.Namespace != s.Namespace || !slices.Equal(p.Dimensions, s.Dimensions) ||
			p.Time.Before(start) || !p.Time.Before(end) {
			continue
		}
		vals := make([]string, len(s.Dimensions))
		for i, d := range s.Dimensions {
			vals[i] = p.Dims[d]
		}
		label := strings.Join(vals, " · ")
		if samples[label] == nil {
			samples[label] = make([][]float64, n)
			dims[label] = p.Dims
		}
		i := int(p.Time.Sub(start) / period)
		samples[label][i] = append(samples[label][i], v)
	}
	labels := make([]string, 0, len(samples))
	for l := range samples {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	out := make([]Series, 0, len(labels))
	for _, l := range labels {
		ser := Series{Label: l, Dims: dims[l], Start: start, Period: period, Values: make([]float64, n)}
		for i, vs := range samples[l] {
			if len(vs) == 0 {
				ser.Values[i] = math.NaN()
				continue
			}
			ser.Values[i] = stat(vs)
		}
		out = append(out, ser)
	}
	return out, nil
}

// StatOf returns the CloudWatch statistic named name: Sum, Average,
// Minimum, Maximum, SampleCount, or a percentile pNN (p99, p99.9), which is
// the nearest-rank percentile of the samples.
func StatOf(name string) (func([]float64) float64, error) {
	switch name {
	case "Sum":
		return func(v []float64) float64 { return sum(v) }, nil
	case "Average":
		return func(v []float64) float64 { return sum(v) / float64(len(v)) }, nil
	case "Minimum":
		return func(v []float64) float64 { return slices.Min(v) }, nil
	case "Maximum":
		return func(v []float64) float64 { return slices.Max(v) }, nil
	case "SampleCount":
		return func(v []float64) float64 { return float64(len(v)) }, nil
	}
	if strings.HasPrefix(name, "p") {
		if p, err := strconv.ParseFloat(name[1:], 64); err == nil && p > 0 && p <= 100 {
			return func(v []float64) float64 {
				s := slices.Clone(v)
				slices.Sort(s)
				return s[max(int(math.Ceil(p/100*float64(len(s))))-1, 0)]
			}, nil
		}
	}
	return nil, fmt.Errorf("dashboard: statistic %q is not one of Sum, Average, Minimum, Maximum, SampleCount, pNN", name)
}

func sum(v []float64) float64 {
	var t float64
	for _, x := range v {
		t += x
	}
	return t
}

// Interval is a span of time.
type Interval struct{ From, To time.Time }

// Evaluate runs the alarm over points between start and end: its query's
// sum per period (over every series of its schema), and the intervals in
// which it is in ALARM — when at least DatapointsToAlarm of the last
// EvaluationPeriods periods breach the threshold, a period without data
// not breaching (TreatMissingData notBreaching).
func (a Alarm) Evaluate(points []Point, start, end time.Time) (values []float64, alarms []Interval, err error) {
	series, err := Evaluate(Search{Namespace: a.Namespace, Dimensions: a.Dimensions, Metric: a.Metric, Stat: "Sum", Period: a.Period}, points, start, end)
	if err != nil {
		return nil, nil, err
	}
	period := time.Duration(a.Period) * time.Second
	n := int((end.Sub(start) + period - 1) / period)
	values = make([]float64, n)
	for _, s := range series {
		for i, v := range s.Values {
			if !math.IsNaN(v) {
				values[i] += v
			}
		}
	}
	breach := func(v float64) bool {
		switch a.Comparison {
		case "GreaterThanOrEqualToThreshold":
			return v >= a.Threshold
		case "GreaterThanThreshold":
			return v > a.Threshold
		case "LessThanThreshold":
			return v < a.Threshold
		case "LessThanOrEqualToThreshold":
			return v <= a.Threshold
		}
		return false
	}
	if breach(0) {
		return nil, nil, fmt.Errorf("dashboard: alarm %s breaches without data; it is meant for errors", a.Name)
	}
	var open *Interval
	for i := range values {
		bad := 0
		for j := max(0, i-a.EvaluationPeriods+1); j <= i; j++ {
			if breach(values[j]) {
				bad++
			}
		}
		t := start.Add(time.Duration(i+1) * period) // evaluated at the period's end
		switch {
		case bad >= a.DatapointsToAlarm && open == nil:
			open = &Interval{From: t}
		case bad < a.DatapointsToAlarm && open != nil:
			open.To = t
			alarms = append(alarms, *open)
			open = nil
		}
	}
	if open != nil {
		open.To = end
		alarms = append(alarms, *open)
	}
	return values, alarms, nil
}
