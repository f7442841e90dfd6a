package banrule

import (
	"testing"
	"time"
)

func TestLength(t *testing.T) {
	r := Rule{For: 15 * time.Minute, Growth: 2, Max: 24 * time.Hour}
	want := []time.Duration{15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 16 * time.Hour, 24 * time.Hour, 24 * time.Hour}
	for lvl, w := range want {
		if got := r.Length(lvl); got != w {
			t.Errorf("Length(%d) = %s, want %s", lvl, got, w)
		}
	}
	if got := r.Length(1 << 20); got != r.Max {
		t.Errorf("Length of a huge level = %s, want the max", got)
	}
	if got := (Rule{For: time.Minute, Growth: 1, Max: time.Hour}).Length(50); got != time.Minute {
		t.Errorf("growth 1: Length(50) = %s, want 1m", got)
	}
}

// TestDeny: the After-th denial within Within bans; a banned key's denials
// change nothing; a count whose period ended starts over; the level starts
// over after Decay of quiet.
func TestDeny(t *testing.T) {
	r := Rule{After: 3, Within: 10 * time.Minute, For: time.Minute, Growth: 2, Max: time.Hour, Decay: time.Hour}
	t0 := time.Unix(1_700_000_000, 0)
	var s State
	step := func(at time.Duration, started bool, denials int64) {
		t.Helper()
		out := r.Deny(s, t0.Add(at))
		if out.Started != started || out.State.Denials != denials {
			t.Fatalf("Deny at +%s = %+v, want started %v, %d denials", at, out, started, denials)
		}
		s = out.State
	}
	step(0, false, 1)
	step(time.Minute, false, 2)
	step(2*time.Minute, true, 0)
	if s.Until != t0.Add(3*time.Minute) || s.Level != 1 {
		t.Fatalf("first ban %+v", s)
	}
	step(2*time.Minute+30*time.Second, false, 0) // banned: nothing counted
	step(3*time.Minute, false, 1)                // the ban has ended
	step(14*time.Minute, false, 1)               // 11m after the first: a new count
	step(15*time.Minute, false, 2)
	step(16*time.Minute, true, 0)
	if s.Until != t0.Add(18*time.Minute) || s.Level != 2 {
		t.Fatalf("second ban %+v, want 2m, level 2", s)
	}
	// An hour after its end the run is over.
	for i := range 3 {
		step(78*time.Minute+time.Duration(i)*time.Second, i == 2, int64((i+1)%3))
	}
	if s.Until != t0.Add(79*time.Minute+2*time.Second) || s.Level != 1 {
		t.Fatalf("ban after the decay %+v, want 1m, level 1", s)
	}
}
