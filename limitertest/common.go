package limitertest

import (
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

func (s *suite) testCostAboveRemaining(t *testing.T) {
	e := s.env(t)
	l := e.limiter("above-remaining", 10, time.Hour)
	if d := l.allow("k", 7); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("Allow(cost 7) = %+v, want allowed with Remaining 3", d)
	}
	// A request larger than what is left is denied and spends nothing, so
	// a smaller one that fits still gets through afterwards.
	for _, cost := range []int64{4, 5, 10} {
		if d := l.allow("k", cost); d.Allowed || d.Remaining != 3 {
			t.Errorf("Allow(cost %d) with 3 left = %+v, want denied with Remaining 3", cost, d)
		}
	}
	if d := l.allow("k", 3); !d.Allowed || d.Remaining != 0 {
		t.Errorf("Allow(cost 3) with 3 left = %+v, want allowed with Remaining 0", d)
	}
}

func (s *suite) testCostAboveLimit(t *testing.T) {
	e := s.env(t)
	l := e.limiter("above-limit", 5, time.Hour)
	for range 2 {
		if d := l.allow("k", 6); d.Allowed || d.Remaining != 5 {
			t.Errorf("Allow(cost 6) with limit 5 = %+v, want denied with Remaining 5", d)
		}
	}
	if d := l.allow("k", 5); !d.Allowed || d.Remaining != 0 {
		t.Errorf("Allow(cost 5) after denials of cost 6 = %+v, want allowed with Remaining 0 (denials spend nothing)", d)
	}
	if d := l.allow("k", 6); d.Allowed || d.Remaining != 0 {
		t.Errorf("Allow(cost 6) with nothing left = %+v, want denied with Remaining 0", d)
	}
}

func (s *suite) testLimitZero(t *testing.T) {
	e := s.env(t)
	l := e.limiter("zero", 0, time.Minute)
	for i, cost := range []int64{1, 0, 3} {
		e.clock.Advance(time.Duration(i) * time.Minute)
		if d := l.allow("k", cost); d.Allowed || d.Remaining != 0 {
			t.Errorf("Allow(cost %d) with limit 0 at %s = %+v, want denied with Remaining 0", cost, e.at(), d)
		}
	}
}

func (s *suite) testDefaultCost(t *testing.T) {
	e := s.env(t)
	l := e.limiter("default-cost", 3, time.Hour)
	for i, cost := range []int64{0, -5, 1} {
		want := int64(2 - i)
		if d := l.allow("k", cost); !d.Allowed || d.Remaining != want {
			t.Errorf("Allow(cost %d) = %+v, want allowed with Remaining %d (cost <= 0 means 1)", cost, d, want)
		}
	}
}

// testRemainingNeverNegative keeps asking past exhaustion with every cost;
// checkDecision verifies each reply.
func (s *suite) testRemainingNeverNegative(t *testing.T) {
	e := s.env(t)
	l := e.limiter("never-negative", 4, time.Minute)
	spent := int64(0)
	for i := range 24 {
		cost := int64(i%6) + 1
		d := l.allow("k", cost)
		if d.Allowed {
			spent += cost
		}
		if d.Remaining != 4-spent {
			t.Errorf("request %d (cost %d): Remaining %d, want %d", i, cost, d.Remaining, 4-spent)
		}
	}
	if spent != 4 {
		t.Errorf("spent %d units of a limit of 4", spent)
	}
}

func (s *suite) testKeysIndependent(t *testing.T) {
	e := s.env(t)
	l := e.limiter("keys", 2, time.Hour)
	for range 3 {
		l.allow("a", 1)
	}
	if d := l.allow("b", 1); !d.Allowed || d.Remaining != 1 {
		t.Errorf("Allow(b) after exhausting a = %+v, want allowed with Remaining 1", d)
	}
	if d := l.allow("a", 1); d.Allowed {
		t.Errorf("Allow(a) = %+v, want denied", d)
	}
}

func (s *suite) testPoliciesIndependent(t *testing.T) {
	e := s.env(t)
	a := e.limiter("pol-a", 2, time.Hour)
	b := e.limiter("pol-b", 2, time.Hour)
	for range 3 {
		a.allow("k", 1)
	}
	if d := b.allow("k", 1); !d.Allowed || d.Remaining != 1 {
		t.Errorf("pol-b.Allow(k) after exhausting pol-a for k = %+v, want allowed with Remaining 1", d)
	}
}

func (s *suite) testRefundGivesBack(t *testing.T) {
	e := s.env(t)
	l := e.limiter("refund", 5, time.Hour)
	l.allow("k", 2)
	d := l.allow("k", 2)
	if !d.Allowed || d.Remaining != 1 {
		t.Fatalf("second Allow(cost 2) = %+v, want allowed with Remaining 1", d)
	}
	l.refund("k", 2, d)
	if d := l.allow("k", 3); !d.Allowed || d.Remaining != 0 {
		t.Errorf("Allow(cost 3) after a refund of 2 = %+v, want allowed with Remaining 0", d)
	}
}

func (s *suite) testRefundNeverCreatesQuota(t *testing.T) {
	e := s.env(t)
	l := e.limiter("refund-guard", 5, time.Hour)
	// A decision that spent nothing gives nothing back.
	l.refund("fresh", 3, edgelimit.Decision{})
	if d := l.allow("fresh", 1); !d.Allowed || d.Remaining != 4 {
		t.Errorf("Allow after refunding the zero Decision = %+v, want allowed with Remaining 4", d)
	}
	denied := l.allow("fresh", 6)
	l.refund("fresh", 6, denied)
	if d := l.allow("fresh", 1); !d.Allowed || d.Remaining != 3 {
		t.Errorf("Allow after refunding a denial = %+v, want allowed with Remaining 3", d)
	}
	// Refunding one admission twice never takes a count below zero: the
	// quota never exceeds the limit (checkDecision verifies each reply).
	d := l.allow("other", 2)
	l.refund("other", 2, d)
	l.refund("other", 2, d)
	if d := l.allow("other", 1); !d.Allowed || d.Remaining != 4 {
		t.Errorf("Allow after refunding one admission twice = %+v, want allowed with Remaining 4", d)
	}
}

// testRefundByReceipt: a refund undoes exactly what its decision spent,
// where and as of when it was spent, whatever happened since.
// (Regression, issue #10: refunds were made at the time of the refund,
// against whatever the key held then.)
func (s *suite) testRefundByReceipt(t *testing.T) {
	e := s.env(t)
	ws := WindowStart(T0, time.Minute).Add(time.Minute)
	switch s.opts.Algorithm {
	case FixedWindow:
		// A refund after the window ended gives nothing to the new one.
		l := e.limiter("receipt", 5, time.Minute)
		e.clock.Set(ws.Add(59 * time.Second))
		d := l.allow("k", 1)
		e.clock.Set(ws.Add(time.Minute))
		if got := l.allow("k", 5); !got.Allowed {
			t.Fatalf("Allow(cost 5) in the next window = %+v, want allowed", got)
		}
		l.refund("k", 1, d)
		if got := l.allow("k", 1); got.Allowed {
			t.Errorf("Allow in the next window after refunding an admission of the previous one = %+v, want denied: the refund must not give units to the new window", got)
		}
	case SlidingWindow:
		// A refund after the boundary takes from the window the units were
		// spent in, which still weighs.
		l := e.limiter("receipt", 5, time.Minute)
		e.clock.Set(ws.Add(59 * time.Second))
		d := l.allow("k", 5)
		e.clock.Set(ws.Add(time.Minute))
		if got := l.allow("k", 1); got.Allowed {
			t.Fatalf("Allow at the boundary after spending 5 of 5 = %+v, want denied", got)
		}
		l.refund("k", 5, d)
		if got := l.allow("k", 5); !got.Allowed || got.Remaining != 0 {
			t.Errorf("Allow(cost 5) at the boundary after refunding the previous window's 5 = %+v, want allowed with Remaining 0", got)
		}
	case SlidingLog:
		// A refund takes from the millisecond its units were stamped with,
		// not from the oldest units in the window.
		l := e.limiter("receipt", 2, time.Minute)
		e.clock.Set(ws)
		l.allow("k", 1)
		e.clock.Set(ws.Add(30 * time.Second))
		d := l.allow("k", 1)
		e.clock.Set(ws.Add(40 * time.Second))
		l.refund("k", 1, d)
		e.clock.Set(ws.Add(time.Minute)) // the unit of ws leaves
		if got := l.allow("k", 2); !got.Allowed || got.Remaining != 0 {
			t.Errorf("Allow(cost 2) once the only unit left has left = %+v, want allowed with Remaining 0", got)
		}
	case GCRA:
		// 2 per 2 s, burst 2: one unit a second. A refund gives back what
		// of its slot is still to come, and nothing of a later period.
		l := e.limiterBurst("receipt", 2, 2*time.Second, 2)
		e.clock.Set(ws)
		a := l.allow("k", 1) // the slot [ws, ws+1s)
		l.allow("k", 1)      // [ws+1s, ws+2s)
		e.clock.Set(ws.Add(500 * time.Millisecond))
		l.refund("k", 1, a) // half of a's slot has passed: half a unit back
		e.clock.Set(ws.Add(time.Second))
		if got := l.peekOrAllow(t, s, "k", 2); got.Allowed || got.Remaining != 1 {
			t.Errorf("cost 2 at ws+1s after refunding a unit half come back = %+v, want denied with Remaining 1", got)
		}
		e.clock.Set(ws.Add(10 * time.Second)) // long full again
		d := l.allow("k", 1)
		e.clock.Set(ws.Add(20 * time.Second))
		l.allow("k", 2) // a new period: the bucket was full
		l.refund("k", 1, d)
		if got := l.allow("k", 1); got.Allowed {
			t.Errorf("Allow after refunding an admission of an earlier period = %+v, want denied: its unit came back long ago", got)
		}
	}
}

// peekOrAllow peeks when the backend can, else asks (and may spend).
func (l *lim) peekOrAllow(t *testing.T, s *suite, key string, cost int64) edgelimit.Decision {
	t.Helper()
	if s.opts.Peek {
		return l.peek(key, cost)
	}
	return l.allow(key, cost)
}

// testRefundBatch: the decisions of a committed batch carry receipts, and
// refunding one gives back what that member spent.
func (s *suite) testRefundBatch(t *testing.T) {
	e := s.env(t)
	a := e.limiter("rbatch-a", 5, time.Hour)
	b := e.limiter("rbatch-b", 2, time.Hour)
	ds := e.batch([]*lim{a, b}, []string{"k", "k"}, []int64{2, 1})
	checkBatch(t, "batch", ds, want{true, 3}, want{true, 1})
	a.refund("k", 2, ds[0])
	if d := a.allow("k", 5); !d.Allowed || d.Remaining != 0 {
		t.Errorf("rbatch-a.Allow(cost 5) after refunding its batch decision = %+v, want allowed with Remaining 0", d)
	}
	if d := b.allow("k", 1); !d.Allowed || d.Remaining != 0 {
		t.Errorf("rbatch-b.Allow = %+v, want allowed with Remaining 0 (its member was not refunded)", d)
	}
}

// testPeekSpendsNothing: peeks report the state without spending it.
func (s *suite) testPeekSpendsNothing(t *testing.T) {
	e := s.env(t)
	l := e.limiter("peek", 3, time.Hour)
	for range 5 {
		if d := l.peek("k", 1); !d.Allowed || d.Remaining != 3 {
			t.Fatalf("Peek of a fresh key = %+v, want allowed with Remaining 3 (the quota left without the request)", d)
		}
	}
	if d := l.allow("k", 1); !d.Allowed || d.Remaining != 2 {
		t.Errorf("Allow after 5 peeks = %+v, want allowed with Remaining 2", d)
	}
	if d := l.peek("k", 3); d.Allowed || d.Remaining != 2 {
		t.Errorf("Peek(cost 3) with 2 left = %+v, want denied with Remaining 2", d)
	}
	if d := l.allow("k", 2); !d.Allowed || d.Remaining != 0 {
		t.Errorf("Allow(cost 2) after peeks = %+v, want allowed with Remaining 0", d)
	}
}

// testPeekReportsDenial: a peek at an exhausted key reports the denial a
// request would get, the same every time, until the quota comes back.
func (s *suite) testPeekReportsDenial(t *testing.T) {
	e := s.env(t)
	l := e.limiter("peek-denial", 2, time.Minute)
	l.allow("k", 2)
	for i := range 3 {
		p := l.peek("k", 1)
		d := l.allow("k", 1)
		p.Policy, d.Policy = "", ""
		if p.Allowed || p != d {
			t.Errorf("peek %d at an exhausted key = %+v; want the denial a request gets, %+v", i, p, d)
		}
	}
	e.clock.Advance(2 * time.Minute)
	if d := l.peek("k", 2); !d.Allowed || d.Remaining != 2 {
		t.Errorf("Peek(cost 2) two windows later = %+v, want allowed with Remaining 2", d)
	}
}

// batch runs AllowBatch on the first member and checks every decision.
func (e *env) batch(members []*lim, keys []string, costs []int64) []edgelimit.Decision {
	e.t.Helper()
	items := make([]edgelimit.BatchItem, len(members))
	for i, m := range members {
		bl, ok := m.l.(edgelimit.BatchLimiter)
		if !ok {
			e.t.Fatalf("%T claims Batch but is not an edgelimit.BatchLimiter", m.l)
		}
		if bl.BatchKey() == "" || bl.BatchKey() != members[0].l.(edgelimit.BatchLimiter).BatchKey() {
			e.t.Fatalf("limiters from one backend have BatchKeys %q and %q; want equal and non-empty",
				bl.BatchKey(), members[0].l.(edgelimit.BatchLimiter).BatchKey())
		}
		items[i] = edgelimit.BatchItem{Limiter: bl, Request: edgelimit.Request{Key: keys[i], Cost: costs[i]}}
	}
	ds, err := items[0].Limiter.AllowBatch(e.ctx(), items)
	if err != nil {
		e.t.Fatalf("AllowBatch at %s: %v", e.at(), err)
	}
	if len(ds) != len(items) {
		e.t.Fatalf("AllowBatch returned %d decisions for %d items", len(ds), len(items))
	}
	committed := true
	for _, d := range ds {
		committed = committed && d.Allowed
	}
	for i, d := range ds {
		if msg := checkDecision(members[i].p, max(costs[i], 1), d); msg != "" {
			e.t.Errorf("AllowBatch item %d (%s) = %+v: %s", i, members[i].p.Name, d, msg)
		}
		if msg := checkReceipt(d, committed); msg != "" {
			e.t.Errorf("AllowBatch item %d (%s) = %+v: %s", i, members[i].p.Name, d, msg)
		}
	}
	return ds
}

type want struct {
	allowed   bool
	remaining int64
}

func checkBatch(t *testing.T, label string, ds []edgelimit.Decision, wants ...want) {
	t.Helper()
	for i, w := range wants {
		if ds[i].Allowed != w.allowed || ds[i].Remaining != w.remaining {
			t.Errorf("%s: item %d = {Allowed %v, Remaining %d}, want {%v, %d}",
				label, i, ds[i].Allowed, ds[i].Remaining, w.allowed, w.remaining)
		}
	}
}

func (s *suite) testBatchAllOrNothing(t *testing.T) {
	e := s.env(t)
	a := e.limiter("batch-a", 5, time.Hour)
	b := e.limiter("batch-b", 2, time.Hour)
	ms, keys, costs := []*lim{a, b}, []string{"k", "k"}, []int64{1, 1}
	checkBatch(t, "first batch", e.batch(ms, keys, costs), want{true, 4}, want{true, 1})
	checkBatch(t, "second batch", e.batch(ms, keys, costs), want{true, 3}, want{true, 0})
	// b is exhausted: the batch is denied and a keeps its quota; a's
	// decision reports its state without this request.
	checkBatch(t, "third batch", e.batch(ms, keys, costs), want{true, 3}, want{false, 0})
	checkBatch(t, "fourth batch", e.batch(ms, keys, costs), want{true, 3}, want{false, 0})
	if d := a.allow("k", 1); !d.Allowed || d.Remaining != 2 {
		t.Errorf("batch-a.Allow after two denied batches = %+v, want allowed with Remaining 2: a denied batch must spend nothing", d)
	}
}

func (s *suite) testBatchNamesEveryViolation(t *testing.T) {
	e := s.env(t)
	a := e.limiter("viol-a", 1, time.Hour)
	b := e.limiter("viol-b", 1, time.Hour)
	c := e.limiter("viol-c", 10, time.Hour)
	ms, keys, costs := []*lim{a, b, c}, []string{"k", "k", "k"}, []int64{1, 1, 1}
	checkBatch(t, "first batch", e.batch(ms, keys, costs), want{true, 0}, want{true, 0}, want{true, 9})
	ds := e.batch(ms, keys, costs)
	checkBatch(t, "second batch", ds, want{false, 0}, want{false, 0}, want{true, 9})
	if d := c.allow("k", 1); !d.Allowed || d.Remaining != 8 {
		t.Errorf("viol-c.Allow after a denied batch = %+v, want allowed with Remaining 8", d)
	}
}

func (s *suite) testBatchCostAboveRemaining(t *testing.T) {
	e := s.env(t)
	a := e.limiter("bcost-a", 5, time.Hour)
	b := e.limiter("bcost-b", 5, time.Hour)
	ms, keys := []*lim{a, b}, []string{"k", "k"}
	checkBatch(t, "first batch", e.batch(ms, keys, []int64{4, 2}), want{true, 1}, want{true, 3})
	checkBatch(t, "second batch", e.batch(ms, keys, []int64{2, 2}), want{false, 1}, want{true, 3})
	if d := b.allow("k", 3); !d.Allowed || d.Remaining != 0 {
		t.Errorf("bcost-b.Allow(cost 3) after a denied batch = %+v, want allowed with Remaining 0", d)
	}
	// Different keys in one batch (per-IP and per-API-key policies).
	checkBatch(t, "two keys", e.batch(ms, []string{"k", "other"}, []int64{1, 5}), want{true, 0}, want{true, 0})
}

func (s *suite) testBatchSingle(t *testing.T) {
	e := s.env(t)
	a := e.limiter("single", 1, time.Hour)
	checkBatch(t, "first", e.batch([]*lim{a}, []string{"k"}, []int64{1}), want{true, 0})
	checkBatch(t, "second", e.batch([]*lim{a}, []string{"k"}, []int64{1}), want{false, 0})
}
