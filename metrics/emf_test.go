package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/metrics"
)

var t0 = time.Unix(1_700_000_000, 123_000_000)

func fixedNow() time.Time { return t0 }

// emfUnits are the units the EMF specification allows (the CloudWatch
// StandardUnit values).
var emfUnits = map[string]bool{
	"Seconds": true, "Microseconds": true, "Milliseconds": true, "Bytes": true, "Kilobytes": true,
	"Megabytes": true, "Gigabytes": true, "Terabytes": true, "Bits": true, "Kilobits": true,
	"Megabits": true, "Gigabits": true, "Terabits": true, "Percent": true, "Count": true,
	"Bytes/Second": true, "Kilobytes/Second": true, "Megabytes/Second": true, "Gigabytes/Second": true,
	"Terabytes/Second": true, "Bits/Second": true, "Kilobits/Second": true, "Megabits/Second": true,
	"Gigabits/Second": true, "Terabits/Second": true, "Count/Second": true, "None": true,
}

// checkEMF validates one log event against the CloudWatch embedded metric
// format specification ("Specification: Embedded metric format", CloudWatch
// User Guide):
//   - the event is one JSON object with nothing before or after it;
//   - the root has "_aws", an object with "Timestamp" (a non-negative
//     integer of milliseconds since the epoch) and "CloudWatchMetrics" (an
//     array of MetricDirective);
//   - a MetricDirective has exactly Namespace (a 1-255 character string),
//     Dimensions (an array of DimensionSet: arrays of at most 30 strings)
//     and Metrics (an array of at most 100 MetricDefinition);
//   - a MetricDefinition has Name (1-255 characters) and optionally Unit
//     (a CloudWatch unit) and StorageResolution (1 or 60), nothing else;
//   - every dimension a DimensionSet names is a root member with a string
//     value (1 to 1024 characters), and every metric is a root member whose
//     value is a number or an array of at most 100 numbers.
//
// It returns the decoded root for further checks.
func checkEMF(t *testing.T, line []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("line is not a JSON object: %v\n%s", err, line)
	}
	if rest := strings.TrimSpace(string(line[dec.InputOffset():])); rest != "" {
		t.Fatalf("data after the JSON object: %q", rest)
	}
	aws, ok := root["_aws"].(map[string]any)
	if !ok {
		t.Fatalf("_aws is missing or not an object: %s", line)
	}
	ts, ok := aws["Timestamp"].(json.Number)
	if !ok {
		t.Fatalf("_aws.Timestamp is missing or not a number: %s", line)
	}
	if n, err := ts.Int64(); err != nil || n < 0 {
		t.Fatalf("_aws.Timestamp %s is not a non-negative integer of milliseconds", ts)
	}
	directives, ok := aws["CloudWatchMetrics"].([]any)
	if !ok {
		t.Fatalf("_aws.CloudWatchMetrics is missing or not an array: %s", line)
	}
	for i, d := range directives {
		dir, ok := d.(map[string]any)
		if !ok {
			t.Fatalf("MetricDirective %d is not an object", i)
		}
		for k := range dir {
			if k != "Namespace" && k != "Dimensions" && k != "Metrics" {
				t.Errorf("MetricDirective %d has an additional member %q", i, k)
			}
		}
		ns, ok := dir["Namespace"].(string)
		if !ok || len(ns) < 1 || len(ns) > 255 {
			t.Errorf("MetricDirective %d: Namespace %v must be a 1-255 character string", i, dir["Namespace"])
		}
		dims, ok := dir["Dimensions"].([]any)
		if !ok {
			t.Fatalf("MetricDirective %d: Dimensions is missing or not an array", i)
		}
		for j, ds := range dims {
			set, ok := ds.([]any)
			if !ok {
				t.Fatalf("DimensionSet %d.%d is not an array", i, j)
			}
			if len(set) > 30 {
				t.Errorf("DimensionSet %d.%d has %d dimensions, more than 30", i, j, len(set))
			}
			for _, ref := range set {
				name, ok := ref.(string)
				if !ok {
					t.Fatalf("DimensionSet %d.%d has a non-string reference %v", i, j, ref)
				}
				v, ok := root[name].(string)
				if !ok {
					t.Errorf("dimension %q is not a string member of the root: %v", name, root[name])
					continue
				}
				if n := utf8.RuneCountInString(v); n < 1 || n > 1024 {
					t.Errorf("dimension %q value has %d characters, want 1-1024", name, n)
				}
			}
		}
		defs, ok := dir["Metrics"].([]any)
		if !ok {
			t.Fatalf("MetricDirective %d: Metrics is missing or not an array", i)
		}
		if len(defs) > 100 {
			t.Errorf("MetricDirective %d has %d metrics, more than 100", i, len(defs))
		}
		for j, m := range defs {
			def, ok := m.(map[string]any)
			if !ok {
				t.Fatalf("MetricDefinition %d.%d is not an object", i, j)
			}
			for k := range def {
				if k != "Name" && k != "Unit" && k != "StorageResolution" {
					t.Errorf("MetricDefinition %d.%d has an additional member %q", i, j, k)
				}
			}
			name, ok := def["Name"].(string)
			if !ok || len(name) < 1 || len(name) > 255 {
				t.Errorf("MetricDefinition %d.%d: Name %v must be a 1-255 character string", i, j, def["Name"])
				continue
			}
			if u, has := def["Unit"]; has {
				if s, ok := u.(string); !ok || !emfUnits[s] {
					t.Errorf("metric %q: Unit %v is not a CloudWatch unit", name, u)
				}
			}
			if r, has := def["StorageResolution"]; has {
				if n, ok := r.(json.Number); !ok || (n.String() != "1" && n.String() != "60") {
					t.Errorf("metric %q: StorageResolution %v must be 1 or 60", name, r)
				}
			}
			switch v := root[name].(type) {
			case json.Number:
				if f, err := v.Float64(); err != nil || math.IsInf(f, 0) {
					t.Errorf("metric %q value %s is not a finite number", name, v)
				}
			case []any:
				if len(v) > 100 {
					t.Errorf("metric %q has %d values, more than 100", name, len(v))
				}
				for _, x := range v {
					if _, ok := x.(json.Number); !ok {
						t.Errorf("metric %q has a non-number value %v", name, x)
					}
				}
			default:
				t.Errorf("metric %q is not a number or an array of numbers at the root: %v", name, root[name])
			}
		}
	}
	return root
}

func TestEMFLinesFollowTheSpecification(t *testing.T) {
	storeErr := errors.New("dynamodb: connection refused")
	tests := []struct {
		name  string
		ev    edgelimit.Event
		want  map[string]string // metric or property -> JSON value
		route string
	}{
		{
			name: "allowed",
			ev:   edgelimit.Event{Route: "GET /paid/*", Policy: "paid-daily", Strategy: "durable", Allowed: true, Latency: 3412 * time.Microsecond},
			want: map[string]string{"Allowed": "1", "Denied": "0", "ShadowDenied": "0", "Degraded": "0", "StoreLatency": "3.412", "Strategy": `"durable"`},
		},
		{
			name: "denied",
			ev:   edgelimit.Event{Route: "POST /contact", Policy: "contact", Strategy: "kv", Latency: 250 * time.Microsecond},
			want: map[string]string{"Allowed": "0", "Denied": "1", "ShadowDenied": "0", "Degraded": "0", "StoreLatency": "0.25"},
		},
		{
			name: "shadow denial is not a denial",
			ev:   edgelimit.Event{Route: "GET /search", Policy: "search", Strategy: "durable", Shadow: true},
			want: map[string]string{"Allowed": "0", "Denied": "0", "ShadowDenied": "1", "Degraded": "0", "StoreLatency": "0"},
		},
		{
			name: "degraded fail open",
			ev:   edgelimit.Event{Route: "POST /contact", Policy: "contact", Strategy: "kv", Allowed: true, Degraded: true, StoreError: storeErr, Latency: 100 * time.Millisecond},
			want: map[string]string{"Allowed": "1", "Denied": "0", "Degraded": "1", "StoreLatency": "100"},
		},
		{
			name: "degraded fail closed",
			ev:   edgelimit.Event{Route: "GET /paid/*", Policy: "paid-daily", Strategy: "durable", Degraded: true, StoreError: storeErr},
			want: map[string]string{"Allowed": "0", "Denied": "1", "Degraded": "1"},
		},
		{
			name: "refunded: another policy denied, so it let nothing through",
			ev:   edgelimit.Event{Route: "GET /x", Policy: "soft", Strategy: "kv", Allowed: true, Refunded: true},
			want: map[string]string{"Allowed": "0", "Denied": "0", "Refunded": "1", "RefundFailed": "0"},
		},
		{
			name: "a refund that could not land is counted",
			ev:   edgelimit.Event{Route: "GET /x", Policy: "soft", Strategy: "kv", Allowed: true, Refunded: true, RefundError: storeErr},
			want: map[string]string{"Allowed": "0", "Refunded": "0", "RefundFailed": "1"},
		},
		{
			name: "a peeked violation is a denial",
			ev:   edgelimit.Event{Route: "GET /x", Policy: "hourly", Strategy: "durable", Peeked: true},
			want: map[string]string{"Allowed": "0", "Denied": "1"},
		},
		{
			name: "a peek that would allow lets nothing through",
			ev:   edgelimit.Event{Route: "GET /x", Policy: "daily", Strategy: "durable", Peeked: true, Allowed: true},
			want: map[string]string{"Allowed": "0", "Denied": "0"},
		},
		{
			name: "store errors are counted, degraded or not",
			ev:   edgelimit.Event{Route: "GET /x", Policy: "daily", Strategy: "durable", Peeked: true, StoreError: storeErr},
			want: map[string]string{"StoreErrors": "1", "Degraded": "0", "Denied": "0", "Allowed": "0"},
		},
		{
			name: "hostile route text stays one valid line",
			ev:   edgelimit.Event{Route: "GET /a\"b\\c\n\x00\u2028\xff", Policy: "p", Allowed: true},
			want: map[string]string{"Route": `"GET /a\"b\\c\n\u0000\u2028\ufffd"`},
		},
		{
			name: "empty route becomes a valid dimension",
			ev:   edgelimit.Event{Policy: "p", Allowed: true},
			want: map[string]string{"Route": `"(none)"`},
		},
		{
			name: "negative latency is clamped",
			ev:   edgelimit.Event{Route: "GET /", Policy: "p", Allowed: true, Latency: -time.Second},
			want: map[string]string{"StoreLatency": "0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			m, err := metrics.NewEMF(metrics.EMFConfig{Writer: &out, Namespace: "edgelimit-test", Function: "paid", Now: fixedNow})
			if err != nil {
				t.Fatal(err)
			}
			m.Observe(tt.ev)
			line := out.Bytes()
			if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
				t.Fatalf("Observe wrote %q, want exactly one newline-terminated line", line)
			}
			root := checkEMF(t, line)
			if got := root["Policy"]; got != tt.ev.Policy {
				t.Errorf("Policy = %v, want %q", got, tt.ev.Policy)
			}
			if got := root["Function"]; got != "paid" {
				t.Errorf("Function = %v, want paid", got)
			}
			ts := root["_aws"].(map[string]any)["Timestamp"].(json.Number).String()
			if ts != "1700000000123" {
				t.Errorf("Timestamp = %s, want 1700000000123", ts)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(line, &raw); err != nil {
				t.Fatal(err)
			}
			for k, want := range tt.want {
				if got := string(raw[k]); got != want {
					t.Errorf("%s = %s, want %s", k, got, want)
				}
			}
		})
	}
}

func TestEMFDirectiveNamesEveryMetric(t *testing.T) {
	var out bytes.Buffer
	m, err := metrics.NewEMF(metrics.EMFConfig{Writer: &out, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(edgelimit.Event{Route: "GET /", Policy: "p", Allowed: true})
	root := checkEMF(t, out.Bytes())
	dir := root["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if got := dir["Namespace"]; got != metrics.DefaultNamespace {
		t.Errorf("Namespace = %v, want %q", got, metrics.DefaultNamespace)
	}
	if got := fmt.Sprint(dir["Dimensions"]); got != "[[Policy Route]]" {
		t.Errorf("Dimensions = %s, want [[Policy Route]]", got)
	}
	var names []string
	for _, d := range dir["Metrics"].([]any) {
		def := d.(map[string]any)
		names = append(names, fmt.Sprintf("%s/%s", def["Name"], def["Unit"]))
	}
	want := "Allowed/Count Denied/Count ShadowDenied/Count Degraded/Count StoreErrors/Count Refunded/Count RefundFailed/Count OverrideErrors/Count StoreLatency/Milliseconds"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("Metrics = %s, want %s", got, want)
	}
	if _, ok := root["Function"]; ok {
		t.Errorf("Function property written without EMFConfig.Function")
	}
}

func TestEMFCutsLongDimensionValues(t *testing.T) {
	var out bytes.Buffer
	m, _ := metrics.NewEMF(metrics.EMFConfig{Writer: &out, Now: fixedNow})
	route := "GET /" + strings.Repeat("é", 600) // 1205 bytes
	m.Observe(edgelimit.Event{Route: route, Policy: "p", Allowed: true})
	root := checkEMF(t, out.Bytes())
	got := root["Route"].(string)
	if len(got) > metrics.MaxDimensionValueLength || !utf8.ValidString(got) || !strings.HasPrefix(route, got) {
		t.Errorf("Route cut to %d bytes (valid UTF-8 %v, prefix %v), want a prefix of at most %d bytes",
			len(got), utf8.ValidString(got), strings.HasPrefix(route, got), metrics.MaxDimensionValueLength)
	}
}

func TestNewEMFRejectsBadNamespaces(t *testing.T) {
	for _, ns := range []string{strings.Repeat("n", 256), "AWS/Lambda", ":x", "a\nb", "\xff"} {
		if _, err := metrics.NewEMF(metrics.EMFConfig{Namespace: ns}); err == nil {
			t.Errorf("NewEMF(Namespace %q) = nil error, want an error", ns)
		}
	}
	for _, ns := range []string{"edgelimit", "My App/Rate Limits", strings.Repeat("n", 255)} {
		if _, err := metrics.NewEMF(metrics.EMFConfig{Namespace: ns}); err != nil {
			t.Errorf("NewEMF(Namespace %q) = %v, want nil", ns, err)
		}
	}
}

// TestEMFConcurrentLinesDoNotInterleave runs many goroutines through one
// EMF, as a multi-concurrency runtime or edgelimit serve does.
func TestEMFConcurrentLinesDoNotInterleave(t *testing.T) {
	var out syncBuffer
	m, _ := metrics.NewEMF(metrics.EMFConfig{Writer: &out, Now: fixedNow})
	const goroutines, each = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m.Observe(edgelimit.Event{Route: "GET /r", Policy: fmt.Sprintf("p%d-%d", g, i), Allowed: i%2 == 0})
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != goroutines*each {
		t.Fatalf("%d lines, want %d", len(lines), goroutines*each)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		root := checkEMF(t, []byte(l))
		seen[root["Policy"].(string)] = true
	}
	if len(seen) != goroutines*each {
		t.Errorf("%d distinct policies, want %d", len(seen), goroutines*each)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stdout closed") }

func TestEMFWriteErrorIsReportedNotFatal(t *testing.T) {
	var got error
	m, _ := metrics.NewEMF(metrics.EMFConfig{Writer: failingWriter{}, OnError: func(err error) { got = err }})
	m.Observe(edgelimit.Event{Route: "GET /", Policy: "p"})
	if got == nil || !strings.Contains(got.Error(), "stdout closed") {
		t.Errorf("OnError got %v, want the write error", got)
	}
}

var floatRe = regexp.MustCompile(`"StoreLatency":([0-9.]+)\}`)

func TestEMFLatencyHasMicrosecondPrecision(t *testing.T) {
	for _, tt := range []struct {
		lat  time.Duration
		want string
	}{
		{0, "0"},
		{time.Microsecond, "0.001"},
		{1500 * time.Nanosecond, "0.001"},
		{12 * time.Millisecond, "12"},
		{2*time.Second + 345*time.Microsecond, "2000.345"},
	} {
		var out bytes.Buffer
		m, _ := metrics.NewEMF(metrics.EMFConfig{Writer: &out, Now: fixedNow})
		m.Observe(edgelimit.Event{Route: "GET /", Policy: "p", Allowed: true, Latency: tt.lat})
		mm := floatRe.FindStringSubmatch(out.String())
		if mm == nil || mm[1] != tt.want {
			t.Errorf("latency %s: line %q, want StoreLatency %s", tt.lat, out.String(), tt.want)
		}
	}
}

func BenchmarkEMFObserve(b *testing.B) {
	m, _ := metrics.NewEMF(metrics.EMFConfig{Writer: discard{}, Function: "paid"})
	ev := edgelimit.Event{Route: "GET /paid/*", Policy: "paid-daily", Strategy: "durable", Allowed: true, Latency: 3 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(ev)
	}
}

// BenchmarkEMFObserveWithKey: a decision's line with its hashed key, as
// the engine's events carry it.
func BenchmarkEMFObserveWithKey(b *testing.B) {
	m, _ := metrics.NewEMF(metrics.EMFConfig{Writer: discard{}, Function: "paid"})
	ev := edgelimit.Event{Route: "GET /paid/*", Policy: "paid-daily", Strategy: "durable", Allowed: true, Latency: 3 * time.Millisecond,
		Key: "dGhpcyBpcyBhIGhhc2gxMg"}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(ev)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// A decision that was not made by counting says why, as a property an
// operator can query (CloudWatch Logs Insights); one that was has none.
func TestEMFReasonProperty(t *testing.T) {
	for _, reason := range []string{"allow-list", "deny-list", "after-response", "degraded", "soft-threshold", "proof-of-work", ""} {
		var out bytes.Buffer
		m, _ := metrics.NewEMF(metrics.EMFConfig{Writer: &out, Now: fixedNow})
		m.Observe(edgelimit.Event{Route: "GET /", Policy: "p", Allowed: true, Reason: reason})
		var line map[string]any
		if err := json.Unmarshal(out.Bytes(), &line); err != nil {
			t.Fatalf("%q: %v", reason, err)
		}
		got, ok := line[metrics.PropertyReason]
		if reason == "" && ok || reason != "" && got != reason {
			t.Errorf("reason %q: line has %s = %v (present %v)", reason, metrics.PropertyReason, got, ok)
		}
	}
}

// TestEMFRequestID: a decision made inside a Lambda invocation carries the
// invocation's request id under the key the log lines use; outside Lambda
// (no lambdacontext, or no context at all) the property is absent.
func TestEMFRequestID(t *testing.T) {
	lambda := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: `req-"1"`})
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want any
	}{
		{"lambda", lambda, `req-"1"`},
		{"plain", context.Background(), nil},
		{"none", nil, nil},
	} {
		var out bytes.Buffer
		m, _ := metrics.NewEMF(metrics.EMFConfig{Writer: &out, Now: fixedNow})
		m.Observe(edgelimit.Event{Route: "GET /", Policy: "p", Allowed: true, Context: tt.ctx})
		var line map[string]any
		if err := json.Unmarshal(out.Bytes(), &line); err != nil {
			t.Fatalf("%s: %v: %s", tt.name, err, out.Bytes())
		}
		if got := line["requestId"]; got != tt.want {
			t.Errorf("%s: requestId = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestEMFBreakerLines: a change of a store's breaker is one EMF line with
// the dimension Store, one count per state (1 for the new one), and the
// state, policies and failures as properties.
func TestEMFBreakerLines(t *testing.T) {
	var out bytes.Buffer
	m, err := metrics.NewEMF(metrics.EMFConfig{Writer: &out, Namespace: "edgelimit-test", Function: "search", Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveBreaker(edgelimit.BreakerEvent{Store: "durable", Policies: []string{"paid-daily", "search"},
		State: edgelimit.BreakerOpen, From: edgelimit.BreakerClosed, Failures: 5, Err: errors.New("timeout")})
	m.ObserveBreaker(edgelimit.BreakerEvent{Store: "durable", Policies: []string{"paid-daily", "search"},
		State: edgelimit.BreakerClosed, From: edgelimit.BreakerHalfOpen})
	lines := bytes.SplitAfter(out.Bytes(), []byte("\n"))
	if len(lines) != 3 || len(lines[2]) != 0 {
		t.Fatalf("wrote %q, want two lines", out.Bytes())
	}
	for i, want := range []map[string]string{
		{"Store": `"durable"`, "State": `"open"`, "Policies": `"paid-daily,search"`, "Failures": "5", "Function": `"search"`,
			"BreakerOpen": "1", "BreakerHalfOpen": "0", "BreakerClosed": "0"},
		{"State": `"closed"`, "BreakerOpen": "0", "BreakerHalfOpen": "0", "BreakerClosed": "1", "Failures": ""},
	} {
		root := checkEMF(t, lines[i])
		dir := root["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
		if got := fmt.Sprint(dir["Dimensions"]); got != "[[Store]]" {
			t.Errorf("line %d: Dimensions = %s, want [[Store]]", i, got)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(lines[i], &raw); err != nil {
			t.Fatal(err)
		}
		for k, w := range want {
			if got := string(raw[k]); got != w {
				t.Errorf("line %d: %s = %s, want %s", i, k, got, w)
			}
		}
	}
}

// TestEMFKeyHashIsAPropertyNotADimension: a decision's hashed key is written
// as the KeyHash property, never named in the directive's dimension sets
// (a dimension per client would be a metric per client); a decision without
// one (a list's) has no KeyHash.
func TestEMFKeyHashIsAPropertyNotADimension(t *testing.T) {
	for _, key := range []string{"dGhpcyBpcyBhIGhhc2g", ""} {
		var out bytes.Buffer
		m, _ := metrics.NewEMF(metrics.EMFConfig{Writer: &out, Now: fixedNow})
		m.Observe(edgelimit.Event{Route: "GET /", Policy: "p", Allowed: false, Key: key})
		line := checkEMF(t, out.Bytes())
		got, ok := line[metrics.PropertyKeyHash]
		if key == "" && ok || key != "" && got != key {
			t.Errorf("key %q: line has %s = %v (present %v)", key, metrics.PropertyKeyHash, got, ok)
		}
		for _, d := range line["_aws"].(map[string]any)["CloudWatchMetrics"].([]any) {
			for _, set := range d.(map[string]any)["Dimensions"].([]any) {
				for _, name := range set.([]any) {
					if name == metrics.PropertyKeyHash {
						t.Errorf("%s is a dimension: %s", metrics.PropertyKeyHash, out.Bytes())
					}
				}
			}
		}
	}
}
