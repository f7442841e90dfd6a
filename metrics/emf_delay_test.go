package metrics_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/metrics"
)

// TestEMFDelayed: the line of a request that waited for its turn
// (max_delay) declares and carries Delayed 1 and WaitTime; a cut wait is a
// denial that waited; every other line is as it always was, without them.
func TestEMFDelayed(t *testing.T) {
	m, err := metrics.NewEMF(metrics.EMFConfig{Now: func() time.Time { return time.Unix(1700000000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		AWS struct {
			CloudWatchMetrics []struct {
				Metrics []struct{ Name, Unit string }
			}
		} `json:"_aws"`
		Allowed, Denied *int
		Delayed         *int
		WaitTime        *float64
		Reason          string
	}
	parse := func(ev edgelimit.Event) (l line, declared map[string]string) {
		t.Helper()
		b := m.AppendLine(nil, ev)
		if !bytes.HasSuffix(b, []byte("}\n")) {
			t.Fatalf("line %q does not end the object", b)
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("line %q: %v", b, err)
		}
		declared = map[string]string{}
		for _, d := range l.AWS.CloudWatchMetrics[0].Metrics {
			declared[d.Name] = d.Unit
		}
		return l, declared
	}
	served, decl := parse(edgelimit.Event{Route: "GET /a", Policy: "paced", Strategy: "durable", Allowed: true, Wait: 1500 * time.Microsecond})
	if decl["Delayed"] != "Count" || decl["WaitTime"] != "Milliseconds" || served.Delayed == nil || *served.Delayed != 1 || served.WaitTime == nil || *served.WaitTime != 1.5 || *served.Allowed != 1 {
		t.Errorf("served after a wait: declared %v, Delayed %v, WaitTime %v; want Delayed 1, WaitTime 1.5 (ms), Allowed 1", decl, served.Delayed, served.WaitTime)
	}
	cut, _ := parse(edgelimit.Event{Route: "GET /a", Policy: "paced", Strategy: "durable", Reason: "wait-cut", Wait: 0})
	if cut.Delayed == nil || *cut.Delayed != 1 || cut.WaitTime == nil || *cut.WaitTime != 0 || *cut.Denied != 1 || cut.Reason != "wait-cut" {
		t.Errorf("a wait cut before it began: %+v; want Denied 1, Delayed 1, WaitTime 0, Reason wait-cut", cut)
	}
	plain, decl := parse(edgelimit.Event{Route: "GET /a", Policy: "paced", Strategy: "durable", Allowed: true})
	if _, ok := decl["Delayed"]; ok || plain.Delayed != nil || plain.WaitTime != nil {
		t.Errorf("a request served at once: declared %v, Delayed %v; want neither Delayed nor WaitTime", decl, plain.Delayed)
	}
}
