package kvbucket

import (
	"errors"
	"math"
	"testing"
	"time"
)

// t0 is the fixed instant every step table starts from.
var t0 = time.Unix(1_700_000_000, 0)

// step is one request of a step table: at t0+at, spend cost; want the
// decision's fields. wantReset and wantRetry are checked when non-negative.
type step struct {
	at          time.Duration
	cost        int64
	wantAllowed bool
	wantRemain  int64
	wantReset   time.Duration
	wantRetry   time.Duration
}

// noCheck skips a duration check.
const noCheck = time.Duration(-1)

type stepTable struct {
	name  string
	p     Params
	steps []step
}

// stepTables are the token-bucket behaviours every layer must reproduce
// exactly for a single client: the pure Params, and Bucket over each KV.
// Reset is draft-11's effective window: the time until the next whole token
// comes back (one emission interval, Window/Limit, from a full bucket).
var stepTables = []stepTable{
	{
		name: "burst then empty",
		p:    Params{Capacity: 5, Limit: 5, Window: time.Second}, // a token every 200ms
		steps: []step{
			{0, 1, true, 4, 200 * time.Millisecond, 0},
			{0, 1, true, 3, 200 * time.Millisecond, 0},
			{0, 1, true, 2, 200 * time.Millisecond, 0},
			{0, 1, true, 1, 200 * time.Millisecond, 0},
			{0, 1, true, 0, 200 * time.Millisecond, 0},
			{0, 1, false, 0, 200 * time.Millisecond, 200 * time.Millisecond},
		},
	},
	{
		name: "refill one token at a time",
		p:    Params{Capacity: 2, Limit: 5, Window: time.Second},
		steps: []step{
			{0, 1, true, 1, 200 * time.Millisecond, 0},
			{0, 1, true, 0, 200 * time.Millisecond, 0},
			{100 * time.Millisecond, 1, false, 0, 100 * time.Millisecond, 100 * time.Millisecond}, // half a token
			{200 * time.Millisecond, 1, true, 0, 200 * time.Millisecond, 0},
			{399 * time.Millisecond, 1, false, 0, time.Millisecond, time.Millisecond},
			{400 * time.Millisecond, 1, true, 0, 200 * time.Millisecond, 0},
			{time.Second, 1, true, 1, 200 * time.Millisecond, 0},
		},
	},
	{
		name: "cost greater than one",
		p:    Params{Capacity: 10, Limit: 10, Window: 10 * time.Second},
		steps: []step{
			{0, 4, true, 6, time.Second, 0},
			{0, 4, true, 2, time.Second, 0},
			{0, 4, false, 2, time.Second, 2 * time.Second},
			{time.Second, 4, false, 3, time.Second, time.Second},
			{2 * time.Second, 4, true, 0, time.Second, 0},
			{2 * time.Second, 11, false, 0, time.Second, 10 * time.Second}, // above capacity: never
		},
	},
	{
		name: "capacity clamps the refill",
		p:    Params{Capacity: 3, Limit: 1, Window: time.Second},
		steps: []step{
			{0, 1, true, 2, time.Second, 0},
			{10 * time.Second, 1, true, 2, time.Second, 0}, // not 11: the bucket holds 3
			{10 * time.Second, 1, true, 1, time.Second, 0},
			{10 * time.Second, 1, true, 0, time.Second, 0},
			{10 * time.Second, 1, false, 0, time.Second, time.Second},
		},
	},
	{
		name: "burst above the limit",
		p:    Params{Capacity: 4, Limit: 2, Window: time.Second},
		steps: []step{
			{0, 4, true, 0, 500 * time.Millisecond, 0},
			{500 * time.Millisecond, 1, true, 0, 500 * time.Millisecond, 0},
			{500 * time.Millisecond, 1, false, 0, 500 * time.Millisecond, 500 * time.Millisecond},
			{2500 * time.Millisecond, 4, true, 0, 500 * time.Millisecond, 0},
		},
	},
	{
		name: "idle for a long time",
		p:    Params{Capacity: 5, Limit: 5, Window: time.Minute},
		steps: []step{
			{0, 5, true, 0, 12 * time.Second, 0},
			{100 * 365 * 24 * time.Hour, 1, true, 4, 12 * time.Second, 0},
			{100 * 365 * 24 * time.Hour, 4, true, 0, 12 * time.Second, 0},
			{200 * 365 * 24 * time.Hour, 5, true, 0, 12 * time.Second, 0},
		},
	},
	{
		name: "clock going backwards",
		p:    Params{Capacity: 2, Limit: 1, Window: time.Second},
		steps: []step{
			{10 * time.Second, 1, true, 1, time.Second, 0},
			// 5s earlier: no refill, and the state keeps its later stamp.
			{5 * time.Second, 1, true, 0, 6 * time.Second, 0},
			{5 * time.Second, 1, false, 0, 6 * time.Second, 6 * time.Second},
			{10 * time.Second, 1, false, 0, time.Second, time.Second},
			{11 * time.Second, 1, true, 0, time.Second, 0},
			// An hour back (beyond MaxClockSkew): re-stamped, tokens kept.
			{11*time.Second - time.Hour, 1, false, 0, time.Second, time.Second},
			{12*time.Second - time.Hour, 1, true, 0, time.Second, 0},
		},
	},
	{
		name: "fractional refill rounds against the client",
		p:    Params{Capacity: 1, Limit: 3, Window: time.Second},
		steps: []step{
			{0, 1, true, 0, 333333334 * time.Nanosecond, 0},
			{333333333 * time.Nanosecond, 1, false, 0, time.Nanosecond, time.Nanosecond},
			{333333334 * time.Nanosecond, 1, true, 0, 333333334 * time.Nanosecond, 0},
			{time.Second, 1, true, 0, 333333334 * time.Nanosecond, 0},
		},
	},
	{
		name: "zero cost counts as one",
		p:    Params{Capacity: 2, Limit: 2, Window: time.Minute},
		steps: []step{
			{0, 0, true, 1, 30 * time.Second, 0},
			{0, -3, true, 0, 30 * time.Second, 0},
			{0, 0, false, 0, 30 * time.Second, 30 * time.Second},
		},
	},
}

// bucketTables are the step tables a Bucket must reproduce: stepTables,
// but for a clock going backwards. Params (a state stamped at an instant)
// lets a clock behind another instance's spend the tokens the later state
// had; the Bucket's state is a theoretical arrival time (GCRA), so a clock
// behind sees the spending of a clock ahead as debt and waits for it to
// catch up, and one far behind (beyond MaxClockSkew) repairs the state to
// an empty bucket at its own time.
func bucketTables() []stepTable {
	var out []stepTable
	for _, tc := range stepTables {
		if tc.name == "clock going backwards" {
			tc = stepTable{
				name: "clock going backwards",
				p:    tc.p, // capacity 2, a token a second
				steps: []step{
					{10 * time.Second, 1, true, 1, time.Second, 0},
					// 5s earlier: the state says one token is spent until 11s,
					// which is 4 tokens' time beyond a full bucket here.
					{5 * time.Second, 1, false, 0, 5 * time.Second, 5 * time.Second},
					{10 * time.Second, 1, true, 0, time.Second, 0},
					{10 * time.Second, 1, false, 0, time.Second, time.Second},
					{11 * time.Second, 1, true, 0, time.Second, 0},
					// An hour back (beyond MaxClockSkew): repaired to an empty
					// bucket at this clock's instant.
					{11*time.Second - time.Hour, 1, false, 0, time.Second, time.Second},
					{12*time.Second - time.Hour, 1, true, 0, time.Second, 0},
				},
			}
		}
		out = append(out, tc)
	}
	return out
}

func checkStep(t *testing.T, i int, st step, got allowResult) {
	t.Helper()
	if got.Allowed != st.wantAllowed || got.Remaining != st.wantRemain {
		t.Errorf("step %d: at t0+%s cost %d: allowed, remaining = %v, %d, want %v, %d",
			i, st.at, st.cost, got.Allowed, got.Remaining, st.wantAllowed, st.wantRemain)
	}
	if st.wantReset != noCheck && got.Reset != st.wantReset {
		t.Errorf("step %d: at t0+%s cost %d: Reset = %s, want %s", i, st.at, st.cost, got.Reset, st.wantReset)
	}
	if st.wantRetry != noCheck && got.RetryAfter != st.wantRetry {
		t.Errorf("step %d: at t0+%s cost %d: RetryAfter = %s, want %s", i, st.at, st.cost, got.RetryAfter, st.wantRetry)
	}
}

// allowResult is the part of a Decision the step tables check.
type allowResult struct {
	Allowed           bool
	Remaining         int64
	Reset, RetryAfter time.Duration
}

func TestParamsTakeAtStepTables(t *testing.T) {
	for _, tc := range stepTables {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.p.Full(t0)
			for i, st := range tc.steps {
				next, d := tc.p.TakeAt(s, t0.Add(st.at), st.cost)
				checkStep(t, i, st, allowResult{d.Allowed, d.Remaining, d.Reset, d.RetryAfter})
				if q, w := tc.p.Advertised(); d.Limit != q || d.Window != w {
					t.Errorf("step %d: Limit, Window = %d, %s, want %d, %s", i, d.Limit, d.Window, q, w)
				}
				if !d.Allowed && next != s && !restamped(s, t0.Add(st.at).UnixNano()) {
					t.Errorf("step %d: a denial changed the state: %+v, want %+v", i, next, s)
				}
				s = next
			}
		})
	}
}

func TestParamsStateAt(t *testing.T) {
	p := Params{Capacity: 10, Limit: 10, Window: 10 * time.Second}
	capN := int64(10 * TokenScale)
	tests := []struct {
		name string
		s    State
		now  time.Time
		want State
	}{
		{"refill", State{0, t0.UnixNano()}, t0.Add(1500 * time.Millisecond), State{1500 * TokenScale / 1000, t0.Add(1500 * time.Millisecond).UnixNano()}},
		{"clamp at capacity", State{9 * TokenScale, t0.UnixNano()}, t0.Add(time.Hour), State{capN, t0.Add(time.Hour).UnixNano()}},
		{"negative tokens read as empty", State{-5 * TokenScale, t0.UnixNano()}, t0, State{0, t0.UnixNano()}},
		{"too many tokens read as full", State{math.MaxInt64, t0.UnixNano()}, t0, State{capN, t0.UnixNano()}},
		{"future stamp kept", State{1, t0.Add(time.Second).UnixNano()}, t0, State{1, t0.Add(time.Second).UnixNano()}},
		{"far future stamp re-stamped", State{1, math.MaxInt64}, t0, State{1, t0.UnixNano()}},
		{"ancient stamp is full", State{0, math.MinInt64}, t0, State{capN, t0.UnixNano()}},
		{"zero state is full", State{}, t0, State{capN, t0.UnixNano()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.StateAt(tc.s, tc.now); got != tc.want {
				t.Errorf("StateAt(%+v, %s) = %+v, want %+v", tc.s, tc.now, got, tc.want)
			}
		})
	}
}

func TestParamsRefundAt(t *testing.T) {
	p := Params{Capacity: 3, Limit: 1, Window: time.Second}
	s := State{TokenScale, t0.UnixNano()}
	tests := []struct {
		cost int64
		want int64
	}{
		{1, 2 * TokenScale},
		{2, 3 * TokenScale},
		{5, 3 * TokenScale},
		{math.MaxInt64, 3 * TokenScale},
		{0, 2 * TokenScale},
	}
	for _, tc := range tests {
		if got := p.RefundAt(s, t0, tc.cost); got.Tokens != tc.want {
			t.Errorf("RefundAt(1 token, cost %d) = %d nanotokens, want %d", tc.cost, got.Tokens, tc.want)
		}
	}
}

func TestParamsTimeToFull(t *testing.T) {
	p := Params{Capacity: 60, Limit: 60, Window: time.Minute}
	if got := p.TimeToFull(State{0, t0.UnixNano()}, t0); got != time.Minute {
		t.Errorf("TimeToFull(empty) = %s, want 1m", got)
	}
	if got := p.TimeToFull(State{30 * TokenScale, t0.UnixNano()}, t0.Add(10*time.Second)); got != 20*time.Second {
		t.Errorf("TimeToFull(half, 10s later) = %s, want 20s", got)
	}
	if got := p.TimeToFull(p.Full(t0), t0); got != 0 {
		t.Errorf("TimeToFull(full) = %s, want 0", got)
	}
	// A slow bucket saturates instead of overflowing.
	slow := Params{Capacity: MaxTokens, Limit: 1, Window: 3650 * 24 * time.Hour}
	if got := slow.TimeToFull(State{0, t0.UnixNano()}, t0); got != time.Duration(math.MaxInt64) {
		t.Errorf("TimeToFull(slow empty) = %s, want the maximum duration", got)
	}
}

func TestParamsValidate(t *testing.T) {
	tests := []struct {
		p  Params
		ok bool
	}{
		{Params{Capacity: 1, Limit: 1, Window: time.Nanosecond}, true},
		{Params{Capacity: MaxTokens, Limit: MaxTokens, Window: 3650 * 24 * time.Hour}, true},
		{Params{Capacity: 0, Limit: 1, Window: time.Second}, false},
		{Params{Capacity: 1, Limit: 0, Window: time.Second}, false},
		{Params{Capacity: 1, Limit: 1, Window: 0}, false},
		{Params{Capacity: MaxTokens + 1, Limit: 1, Window: time.Second}, false},
		{Params{Capacity: 1, Limit: MaxTokens + 1, Window: time.Second}, false},
	}
	for _, tc := range tests {
		err := tc.p.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%+v.Validate() = %v, want ok %v", tc.p, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v.Validate() = %v, want it to wrap ErrBadConfig", tc.p, err)
		}
	}
}

// TestParamsExtremes runs the largest numbers through every path: no
// overflow, no panic, sane answers.
func TestParamsExtremes(t *testing.T) {
	for _, p := range []Params{
		{Capacity: MaxTokens, Limit: MaxTokens, Window: time.Nanosecond},
		{Capacity: MaxTokens, Limit: 1, Window: 3650 * 24 * time.Hour},
		{Capacity: 1, Limit: MaxTokens, Window: 3650 * 24 * time.Hour},
	} {
		s := p.Full(t0)
		for _, at := range []time.Duration{0, 1, time.Hour, 1 << 62} {
			for _, cost := range []int64{1, MaxTokens, math.MaxInt64} {
				next, d := p.TakeAt(s, t0.Add(at), cost)
				if d.Remaining < 0 || d.Remaining > p.Capacity || d.Reset < 0 || d.RetryAfter < 0 {
					t.Errorf("%+v: TakeAt(t0+%s, %d) = %+v", p, at, cost, d)
				}
				if next.Tokens < 0 || next.Tokens > p.Capacity*TokenScale {
					t.Errorf("%+v: TakeAt(t0+%s, %d) state %+v out of range", p, at, cost, next)
				}
				s = p.RefundAt(next, t0.Add(at), cost)
			}
		}
	}
}
