package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/policy"
)

// TestMaxDelay: max_delay is read (zero when absent: never wait) and
// refused, at its line, where no request can wait for a turn.
func TestMaxDelay(t *testing.T) {
	head := "version: 1\npolicies:\n  - name: p\n    routes: [\"GET /a\"]\n    key: ip\n    limit: 4\n    window: 1s\n"
	f, err := policy.Parse("p.yaml", []byte(head+"    strategy: durable\n    algorithm: gcra\n    burst: 1\n    max_delay: 250ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Policies[0].MaxDelay; got != 250*time.Millisecond {
		t.Errorf("max_delay 250ms read as %s", got)
	}
	// kv reserves a turn as a gcra does: its bucket goes below empty by
	// the turns waiting (kvbucket).
	f, err = policy.Parse("p.yaml", []byte(head+"    strategy: kv\n    burst: 1\n    max_delay: 250ms\n"))
	if err != nil || f.Policies[0].MaxDelay != 250*time.Millisecond {
		t.Errorf("kv with max_delay 250ms: %v, %v", err, f)
	}
	f, err = policy.Parse("p.yaml", []byte(head+"    strategy: durable\n    algorithm: gcra\n"))
	if err != nil || f.Policies[0].MaxDelay != 0 {
		t.Errorf("without max_delay: %v, MaxDelay %v; want 0", err, f)
	}
	for _, tt := range []struct{ fields, want string }{
		{"    strategy: signed\n    max_delay: 1s\n", `p.yaml:9: policy "p": max_delay needs a strategy that can reserve a unit for a later turn (durable with algorithm: gcra, or kv); strategy signed cannot`},
		{"    strategy: kv\n    charge: response\n    max_delay: 1s\n", `p.yaml:10: policy "p": max_delay does not go with charge or charge_status`},
		{"    strategy: durable\n    algorithm: gcra\n    shadow: true\n    max_delay: 1s\n", `p.yaml:11: policy "p": max_delay does not go with shadow`},
		{"    strategy: durable\n    algorithm: gcra\n    charge: response\n    max_delay: 1s\n", `p.yaml:11: policy "p": max_delay does not go with charge or charge_status`},
		{"    strategy: durable\n    algorithm: gcra\n    max_delay: 31s\n", `p.yaml:10: policy "p": max_delay 31s is longer than 30s`},
		{"    strategy: durable\n    algorithm: gcra\n    max_delay: 100\n", `p.yaml:10: policy "p": max_delay "100" needs a unit, like 100s`},
		{"    strategy: durable\n    algorithm: gcra\n    max_delay: [1s]\n", `p.yaml:10: policy "p": max_delay must be a duration`},
	} {
		_, err := policy.Parse("p.yaml", []byte(head+tt.fields))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.fields, err, tt.want)
		}
	}
}
