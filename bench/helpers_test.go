package main

import (
	"math"
	"testing"
	"time"
)

// These tests cover the arithmetic the report rests on; they never run a
// benchmark or assert a timing.

func TestPercentileNearestRank(t *testing.T) {
	var lats []time.Duration
	for i := 1; i <= 40; i++ {
		lats = append(lats, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.50, 20 * time.Millisecond},
		{0.95, 38 * time.Millisecond},
		{0.99, 40 * time.Millisecond},
		{1, 40 * time.Millisecond},
	} {
		if got := percentile(lats, tc.q); got != tc.want {
			t.Errorf("percentile(1..40 ms, %v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil, 0.5) = %v, want 0", got)
	}
}

func TestCapacity(t *testing.T) {
	for _, tc := range []struct {
		name, op, body string
		rru, wru       float64
	}{
		{"conditional update", "UpdateItem", `{"TableName":"t","ConditionExpression":"n <= :m"}`, 0, 1},
		{"strong read", "GetItem", `{"TableName":"t","ConsistentRead":true}`, 1, 0},
		{"eventual read", "GetItem", `{"TableName":"t"}`, 0.5, 0},
		{"transaction of 2", "TransactWriteItems", `{"TransactItems":[{"Update":{}},{"Update":{}}]}`, 0, 4},
		{"batch read of 3, strong", "BatchGetItem", `{"RequestItems":{"t":{"Keys":[{},{},{}],"ConsistentRead":true}}}`, 3, 0},
		{"batch read of 2, eventual", "BatchGetItem", `{"RequestItems":{"t":{"Keys":[{},{}]}}}`, 1, 0},
		{"table management", "DescribeTable", `{}`, 0, 0},
	} {
		rru, wru := capacity(tc.op, []byte(tc.body))
		if rru != tc.rru || wru != tc.wru {
			t.Errorf("%s: capacity(%s) = %v RRU, %v WRU; want %v, %v", tc.name, tc.op, rru, wru, tc.rru, tc.wru)
		}
	}
}

func TestUSD(t *testing.T) {
	// One conditional write per decision: $0.625 per million.
	if got := usd(1, 0); math.Abs(got-0.625) > 1e-12 {
		t.Errorf("usd(1 WRU, 0 RRU) = %v, want 0.625", got)
	}
	// Read-then-write: one strong read and one write.
	if got := usd(1, 1); math.Abs(got-0.75) > 1e-12 {
		t.Errorf("usd(1 WRU, 1 RRU) = %v, want 0.75", got)
	}
}

func TestSnapshotArithmetic(t *testing.T) {
	a := Snapshot{Calls: map[string]int64{"UpdateItem": 3, "GetItem": 1}, RRU: 1, WRU: 3}
	b := Snapshot{Calls: map[string]int64{"UpdateItem": 1}, WRU: 1}
	d := a.Sub(b)
	if d.Total() != 3 || d.Calls["UpdateItem"] != 2 || d.WRU != 2 || d.RRU != 1 {
		t.Errorf("Sub = %+v, want 2 UpdateItem, 1 GetItem, 2 WRU, 1 RRU", d)
	}
	if s := a.Add(b); s.Total() != 5 || s.WRU != 4 {
		t.Errorf("Add = %+v, want 5 calls, 4 WRU", s)
	}
}

func TestFormatting(t *testing.T) {
	if got := thousands(100000); got != "100,000" {
		t.Errorf("thousands(100000) = %q", got)
	}
	if got := thousands(999); got != "999" {
		t.Errorf("thousands(999) = %q", got)
	}
	if got := ints([]int{1, 8, 64}); got != "1, 8 and 64" {
		t.Errorf("ints = %q", got)
	}
}

func TestPoliciesParse(t *testing.T) {
	for _, spec := range floodPhases {
		if spec.policy == "" {
			continue
		}
		if _, err := benchPolicy(spec.policy); err != nil {
			t.Errorf("phase %s: %v", spec.id, err)
		}
	}
}
