package limitertest

import (
	"encoding/binary"
	"math/big"
	"slices"
	"time"

	"github.com/edgelimit/edgelimit"
)

// A model is the reference implementation of one algorithm's semantics:
// the simplest code that computes every Decision field exactly, against
// which backends are compared step by step. The models are the
// specification; the package documentation states them in prose. A model's
// Receipts are its own (a backend's mean what the backend says); the
// suite compares decisions without them.
type model interface {
	// fits reports whether a request of cost units fits now.
	fits(p *Spec, key string, cost int64, now time.Time) bool
	// allow decides and, if it fits, spends.
	allow(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision
	// peek reports the state without spending: allowed if it fits (with
	// the quota left without this request), else the denial.
	peek(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision
	// refund undoes what d, a decision allow returned for a request of
	// cost, spent, as of now (never before d's instant).
	refund(p *Spec, key string, cost int64, now time.Time, d edgelimit.Decision)
}

func newModel(alg string) model {
	switch alg {
	case SlidingWindow:
		return &slidingModel{m: map[pk]*slidingState{}}
	case SlidingLog:
		return &logModel{m: map[pk][]logEntry{}}
	case GCRA:
		return &gcraModel{m: map[pk]*gcraState{}}
	}
	return &fixedModel{counts: map[modelKey]int64{}}
}

// pk identifies one key of one policy in the models.
type pk struct{ policy, key string }

// Capacity is the most units one request of p can spend: the burst for
// gcra, else the limit.
func Capacity(p *Spec) int64 {
	if p.Algorithm == GCRA && p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
}

// Quota is what a decision of p tells the client in RateLimit-Policy
// (Decision.Limit and Window, q and w): the limit and window, or for gcra
// with a burst other than the limit, the burst over the time the bucket
// takes to fill (10/s with burst 20 is q=20, w=2s), so that Remaining never
// exceeds Limit. The engine has always announced a bucket this way.
func Quota(p *Spec) (int64, time.Duration) {
	c := Capacity(p)
	if p.Algorithm != GCRA || p.Limit <= 0 || c == p.Limit {
		return p.Limit, p.Window
	}
	return c, time.Duration(float64(p.Window) * float64(c) / float64(p.Limit))
}

// decision returns a decision of p with its quota filled in.
func decision(p *Spec, allowed bool) edgelimit.Decision {
	q, w := Quota(p)
	return edgelimit.Decision{Allowed: allowed, Limit: q, Window: w}
}

// neverFits fills the denial of a cost above the capacity: RetryAfter is
// the window, and never shorter than the effective window.
func neverFits(d *edgelimit.Decision, w time.Duration) {
	d.RetryAfter = max(w, d.Reset)
}

// spent reports whether d spent anything a refund could undo.
func spent(d edgelimit.Decision) bool { return d.Allowed && d.Receipt.At != 0 }

func at(d edgelimit.Decision) time.Time { return time.Unix(0, d.Receipt.At) }

// --- fixed window -----------------------------------------------------------

func (m *fixedModel) fits(p *Spec, key string, cost int64, now time.Time) bool {
	return m.counts[modelKey{p.Name, key, WindowStart(now, p.Window).UnixNano()}]+cost <= p.Limit
}

func (m *fixedModel) peek(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision {
	ws := WindowStart(now, p.Window)
	n := m.counts[modelKey{p.Name, key, ws.UnixNano()}]
	d := decision(p, n+cost <= p.Limit)
	d.Reset, d.Remaining = ws.Add(p.Window).Sub(now), max(0, p.Limit-n)
	if !d.Allowed {
		d.Remaining = min(d.Remaining, cost-1)
		d.RetryAfter = d.Reset
	}
	return d
}

// --- sliding window ---------------------------------------------------------

// slidingModel keeps every window's count by index, the newest index and
// the latest instant a request was decided at.
type slidingModel struct {
	m map[pk]*slidingState
}

type slidingState struct {
	counts map[int64]int64
	newest int64
	last   time.Time
}

func (m *slidingModel) st(p *Spec, key string) *slidingState {
	s := m.m[pk{p.Name, key}]
	if s == nil {
		s = &slidingState{counts: map[int64]int64{}, newest: -1 << 62}
		m.m[pk{p.Name, key}] = s
	}
	return s
}

func windowOf(t time.Time, w time.Duration) int64 { return WindowStart(t, w).UnixNano() / int64(w) }

// at returns the window index and the evaluation instant: never before the
// latest instant a request of the key was decided at (a clock behind
// another instance's is decided at that instance's instant), and never in
// a window older than the newest one counted.
func (m *slidingModel) at(p *Spec, s *slidingState, now time.Time) (int64, time.Time) {
	if s.last.After(now) {
		now = s.last
	}
	i := windowOf(now, p.Window)
	if s.newest > i {
		return s.newest, time.Unix(0, s.newest*int64(p.Window))
	}
	return i, now
}

// prevShare is ceil(prev * (end of window i - at) / window), with big
// integers so that it is obviously right.
func prevShare(p *Spec, prev, i int64, at time.Time) int64 {
	left := big.NewInt((i+1)*int64(p.Window) - at.UnixNano())
	num := new(big.Int).Mul(big.NewInt(prev), left)
	w := big.NewInt(int64(p.Window))
	q, r := new(big.Int).QuoRem(num, w, new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func (m *slidingModel) fits(p *Spec, key string, cost int64, now time.Time) bool {
	s := m.st(p, key)
	i, at := m.at(p, s, now)
	return cost <= p.Limit && s.counts[i]+cost+prevShare(p, s.counts[i-1], i, at) <= p.Limit
}

func (m *slidingModel) peek(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision {
	s := m.st(p, key)
	i, at := m.at(p, s, now)
	c, prev := s.counts[i], s.counts[i-1]
	W := int64(p.Window)
	// estimate is the weighted count at t, nothing else arriving.
	estimate := func(t int64) int64 {
		j := t / W
		if t%W < 0 {
			j--
		}
		cj, pj := int64(0), int64(0)
		switch j {
		case i:
			cj, pj = c, prev
		case i + 1:
			pj = c
		}
		return cj + prevShare(p, pj, j, time.Unix(0, t))
	}
	// first is the first nanosecond from at on with estimate <= target,
	// found by search (the estimate only falls with time).
	first := func(target int64) time.Time {
		lo, hi := at.UnixNano()-1, (i+2)*W // estimate(hi) = 0
		for lo+1 < hi {
			mid := lo + (hi-lo)/2
			if estimate(mid) <= target {
				hi = mid
			} else {
				lo = mid
			}
		}
		return time.Unix(0, hi)
	}
	used := estimate(at.UnixNano())
	d := decision(p, m.fits(p, key, cost, now))
	d.Remaining = max(0, p.Limit-used)
	// Reset: until the estimate falls by one; with nothing counted, until
	// the window ends.
	if target := min(used, p.Limit) - 1; target >= 0 {
		d.Reset = first(target).Sub(now)
	} else {
		d.Reset = time.Unix(0, (i+1)*W).Sub(now)
	}
	if d.Allowed {
		return d
	}
	d.Remaining = min(d.Remaining, cost-1)
	if cost > p.Limit {
		neverFits(&d, p.Window)
		return d
	}
	d.RetryAfter = first(p.Limit - cost).Sub(now)
	return d
}

func (m *slidingModel) allow(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision {
	if !m.fits(p, key, cost, now) {
		return m.peek(p, key, cost, now)
	}
	s := m.st(p, key)
	i, at := m.at(p, s, now)
	s.counts[i] += cost
	s.newest = max(s.newest, i)
	s.last = at
	d := m.peek(p, key, 0, now)
	d.Allowed = true
	d.Receipt.At = at.UnixNano()
	return d
}

// refund takes the cost from the count of the decision's window while it
// still weighs (until the end of the next window), never from a later
// window's.
func (m *slidingModel) refund(p *Spec, key string, cost int64, now time.Time, d edgelimit.Decision) {
	if !spent(d) {
		return
	}
	s := m.st(p, key)
	i := windowOf(at(d), p.Window)
	if now.UnixNano() >= (i+2)*int64(p.Window) || s.newest > i+1 {
		return
	}
	if s.counts[i] >= cost {
		s.counts[i] -= cost
	}
}

// --- sliding log ------------------------------------------------------------

// logModel keeps every admission's millisecond and units.
type logModel struct {
	m map[pk][]logEntry
}

type logEntry struct{ ms, units int64 }

func msOf(t time.Time) int64 {
	ns := t.UnixNano()
	ms := ns / 1e6
	if ns%1e6 < 0 {
		ms--
	}
	return ms
}

// at is the evaluation instant: now, or the start of the newest
// millisecond a unit was stamped with, if later (a clock behind another
// instance's is decided at that instance's instant).
func (m *logModel) at(p *Spec, key string, now time.Time) time.Time {
	for _, e := range m.m[pk{p.Name, key}] {
		if s := time.Unix(0, e.ms*1e6); s.After(now) {
			now = s
		}
	}
	return now
}

// live returns the entries still in the window at the instant t: stamped
// less than a window before it (entries stamped after it count too),
// oldest first.
func (m *logModel) live(p *Spec, key string, t time.Time) []logEntry {
	var out []logEntry
	tm, wms := msOf(t), int64(p.Window/time.Millisecond)
	for _, e := range m.m[pk{p.Name, key}] {
		if e.ms > tm-wms && e.units > 0 {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b logEntry) int { return int(a.ms - b.ms) })
	return out
}

func sumUnits(es []logEntry) int64 {
	n := int64(0)
	for _, e := range es {
		n += e.units
	}
	return n
}

func (m *logModel) fits(p *Spec, key string, cost int64, now time.Time) bool {
	return cost <= p.Limit && sumUnits(m.live(p, key, m.at(p, key, now)))+cost <= p.Limit
}

func (m *logModel) peek(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision {
	live := m.live(p, key, m.at(p, key, now))
	used := sumUnits(live)
	expires := func(e logEntry) time.Duration {
		return time.Duration((e.ms+int64(p.Window/time.Millisecond))*1e6 - now.UnixNano())
	}
	d := decision(p, m.fits(p, key, cost, now))
	d.Remaining = max(0, p.Limit-used)
	// Reset: until the oldest unit in the window leaves it; the whole
	// window when nothing is in it.
	d.Reset = p.Window
	if len(live) > 0 {
		d.Reset = expires(live[0])
	}
	if d.Allowed {
		return d
	}
	d.Remaining = min(d.Remaining, cost-1)
	if cost > p.Limit {
		neverFits(&d, p.Window)
		return d
	}
	need := used + cost - p.Limit
	for _, e := range live {
		if need -= e.units; need <= 0 {
			d.RetryAfter = expires(e)
			break
		}
	}
	return d
}

func (m *logModel) allow(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision {
	if !m.fits(p, key, cost, now) {
		return m.peek(p, key, cost, now)
	}
	at := m.at(p, key, now)
	k := pk{p.Name, key}
	m.m[k] = append(m.m[k], logEntry{ms: msOf(at), units: cost})
	d := m.peek(p, key, 0, now)
	d.Allowed = true
	d.Receipt.At = at.UnixNano()
	return d
}

// refund takes the cost from the millisecond the decision's units were
// stamped with, while it is in the window, all or nothing.
func (m *logModel) refund(p *Spec, key string, cost int64, now time.Time, d edgelimit.Decision) {
	if !spent(d) {
		return
	}
	ms, wms := msOf(at(d)), int64(p.Window/time.Millisecond)
	if ms <= msOf(now)-wms {
		return
	}
	es := m.m[pk{p.Name, key}]
	have := int64(0)
	for _, e := range es {
		if e.ms == ms {
			have += e.units
		}
	}
	if have < cost {
		return
	}
	for i := range es {
		if es[i].ms != ms {
			continue
		}
		take := min(es[i].units, cost)
		es[i].units -= take
		if cost -= take; cost == 0 {
			return
		}
	}
}

// --- gcra -------------------------------------------------------------------

// gcraModel keeps each key's theoretical arrival time, its period (which
// changes whenever a request finds the bucket full), the time refunds gave
// back in the period, and the latest instant a request was decided at.
type gcraModel struct {
	m      map[pk]*gcraState
	period int64
}

type gcraState struct {
	tat, last time.Time
	period    int64
	z         time.Duration
}

func (m *gcraModel) st(p *Spec, key string) *gcraState {
	s := m.m[pk{p.Name, key}]
	if s == nil {
		s = &gcraState{}
		m.m[pk{p.Name, key}] = s
	}
	return s
}

// interval is the emission interval: the window divided by the limit,
// rounded up to a nanosecond.
func interval(p *Spec) time.Duration {
	return (p.Window + time.Duration(p.Limit) - 1) / time.Duration(p.Limit)
}

// at is the evaluation instant: now, or the latest instant a request of the
// key was decided at, if later.
func (s *gcraState) at(now time.Time) time.Time {
	if s.last.After(now) {
		return s.last
	}
	return now
}

func (s *gcraState) base(at time.Time) time.Time {
	if s.tat.After(at) {
		return s.tat
	}
	return at
}

func (m *gcraModel) fits(p *Spec, key string, cost int64, now time.Time) bool {
	if p.Limit == 0 || cost > Capacity(p) {
		return false
	}
	s := m.st(p, key)
	at := s.at(now)
	return s.base(at).Add(time.Duration(cost)*interval(p)).Sub(at) <= time.Duration(Capacity(p))*interval(p)
}

func (m *gcraModel) peek(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision {
	d := decision(p, m.fits(p, key, cost, now))
	if p.Limit == 0 {
		d.Reset = p.Window
		neverFits(&d, p.Window)
		return d
	}
	T, B := interval(p), Capacity(p)
	s := m.st(p, key)
	at := s.at(now)
	// x is what the bucket holds, in time; a unit per T.
	x := at.Add(time.Duration(B) * T).Sub(s.base(at))
	units := max(0, int64(x/T))
	if x < 0 {
		units = 0
	}
	d.Remaining = min(B, units)
	// Reset: until the next unit comes back (a full bucket: one interval).
	d.Reset = at.Add(time.Duration(units+1)*T - x).Sub(now)
	if d.Allowed {
		return d
	}
	d.Remaining = min(d.Remaining, cost-1)
	if cost > B {
		neverFits(&d, p.Window)
		return d
	}
	d.RetryAfter = at.Add(time.Duration(cost)*T - x).Sub(now)
	return d
}

func (m *gcraModel) allow(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision {
	if !m.fits(p, key, cost, now) {
		return m.peek(p, key, cost, now)
	}
	s := m.st(p, key)
	at := s.at(now)
	if !s.tat.After(at) { // full: a new period
		m.period++
		s.period, s.z = m.period, 0
	}
	s.tat = s.base(at).Add(time.Duration(cost) * interval(p))
	s.last = at
	d := m.peek(p, key, 0, now)
	d.Allowed = true
	d.Receipt = edgelimit.Receipt{At: at.UnixNano(), Slot: s.period}
	binary.LittleEndian.PutUint64(d.Receipt.ID[:8], uint64(s.tat.UnixNano()))
	binary.LittleEndian.PutUint64(d.Receipt.ID[8:], uint64(s.z))
	return d
}

// refund removes what is still to come of the decision's slot of the
// emission schedule, [end - cost*T, end), as of now: the slot has moved
// forward by at most what refunds gave back in the period since the spend,
// and never starts before the instant of the spend, so the refund takes the
// part of [max(spend + cost*T, end - given back since) - cost*T, that) after
// now. Nothing once the period has ended.
func (m *gcraModel) refund(p *Spec, key string, cost int64, now time.Time, d edgelimit.Decision) {
	if !spent(d) {
		return
	}
	s := m.st(p, key)
	if s.period != d.Receipt.Slot {
		return
	}
	T := time.Duration(cost) * interval(p)
	spentAt := at(d)
	end := time.Unix(0, int64(binary.LittleEndian.Uint64(d.Receipt.ID[:8])))
	since := s.z - time.Duration(binary.LittleEndian.Uint64(d.Receipt.ID[8:]))
	slotEnd := spentAt.Add(T)
	if e := end.Add(-since); e.After(slotEnd) {
		slotEnd = e
	}
	if spentAt.After(now) {
		now = spentAt
	}
	out := min(T, max(0, slotEnd.Sub(now)))
	s.tat = s.tat.Add(-out)
	s.z += out
}
