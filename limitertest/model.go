package limitertest

import (
	"math/big"
	"slices"
	"time"

	"github.com/edgelimit/edgelimit"
)

// A model is the reference implementation of one algorithm's semantics:
// the simplest code that computes every Decision field exactly, against
// which backends are compared step by step. The models are the
// specification; the package documentation states them in prose.
type model interface {
	// fits reports whether a request of cost units fits now.
	fits(p *edgelimit.Policy, key string, cost int64, now time.Time) bool
	// allow decides and, if it fits, spends.
	allow(p *edgelimit.Policy, key string, cost int64, now time.Time) edgelimit.Decision
	// peek reports the state without spending: allowed if it fits (with
	// the quota left without this request), else the denial.
	peek(p *edgelimit.Policy, key string, cost int64, now time.Time) edgelimit.Decision
	// refund gives back cost units, all or nothing, never below zero.
	refund(p *edgelimit.Policy, key string, cost int64, now time.Time)
}

func newModel(alg string) model {
	switch alg {
	case edgelimit.AlgorithmSlidingWindow:
		return &slidingModel{m: map[pk]*slidingState{}}
	case edgelimit.AlgorithmSlidingLog:
		return &logModel{m: map[pk][]logEntry{}}
	case edgelimit.AlgorithmGCRA:
		return &gcraModel{m: map[pk]time.Time{}}
	}
	return &fixedModel{counts: map[modelKey]int64{}}
}

// pk identifies one key of one policy in the models.
type pk struct{ policy, key string }

// Capacity is the most units one request of p can spend: the burst for
// gcra, else the limit.
func Capacity(p *edgelimit.Policy) int64 {
	if p.Algorithm == edgelimit.AlgorithmGCRA && p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
}

func neverFits(d *edgelimit.Decision, w time.Duration) {
	d.RetryAfter = w
	d.Reset = max(d.Reset, w)
}

// --- fixed window -----------------------------------------------------------

func (m *fixedModel) fits(p *edgelimit.Policy, key string, cost int64, now time.Time) bool {
	return m.counts[modelKey{p.Name, key, WindowStart(now, p.Window).UnixNano()}]+cost <= p.Limit
}

func (m *fixedModel) peek(p *edgelimit.Policy, key string, cost int64, now time.Time) edgelimit.Decision {
	ws := WindowStart(now, p.Window)
	n := m.counts[modelKey{p.Name, key, ws.UnixNano()}]
	d := edgelimit.Decision{Allowed: n+cost <= p.Limit, Limit: p.Limit, Window: p.Window,
		Reset: ws.Add(p.Window).Sub(now), Remaining: max(0, p.Limit-n)}
	if !d.Allowed {
		d.Remaining = min(d.Remaining, cost-1)
		d.RetryAfter = d.Reset
	}
	return d
}

// --- sliding window ---------------------------------------------------------

// slidingModel keeps every window's count by index, and the newest index.
type slidingModel struct {
	m map[pk]*slidingState
}

type slidingState struct {
	counts map[int64]int64
	newest int64
}

func (m *slidingModel) st(p *edgelimit.Policy, key string) *slidingState {
	s := m.m[pk{p.Name, key}]
	if s == nil {
		s = &slidingState{counts: map[int64]int64{}, newest: -1 << 62}
		m.m[pk{p.Name, key}] = s
	}
	return s
}

// at returns the window index and the evaluation instant: a decision is
// never evaluated in a window older than the newest one counted (a clock
// behind another instance's moves to that window's start).
func (m *slidingModel) at(p *edgelimit.Policy, s *slidingState, now time.Time) (int64, time.Time) {
	i := WindowStart(now, p.Window).UnixNano() / int64(p.Window)
	if s.newest > i {
		return s.newest, time.Unix(0, s.newest*int64(p.Window))
	}
	return i, now
}

// prevShare is ceil(prev * (end of window i - at) / window), with big
// integers so that it is obviously right.
func prevShare(p *edgelimit.Policy, prev, i int64, at time.Time) int64 {
	left := big.NewInt((i+1)*int64(p.Window) - at.UnixNano())
	num := new(big.Int).Mul(big.NewInt(prev), left)
	w := big.NewInt(int64(p.Window))
	q, r := new(big.Int).QuoRem(num, w, new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func (m *slidingModel) fits(p *edgelimit.Policy, key string, cost int64, now time.Time) bool {
	s := m.st(p, key)
	i, at := m.at(p, s, now)
	return cost <= p.Limit && s.counts[i]+cost+prevShare(p, s.counts[i-1], i, at) <= p.Limit
}

func (m *slidingModel) peek(p *edgelimit.Policy, key string, cost int64, now time.Time) edgelimit.Decision {
	s := m.st(p, key)
	i, at := m.at(p, s, now)
	c, prev := s.counts[i], s.counts[i-1]
	share := prevShare(p, prev, i, at)
	W := int64(p.Window)
	d := edgelimit.Decision{Allowed: m.fits(p, key, cost, now), Limit: p.Limit, Window: p.Window,
		Remaining: max(0, p.Limit-c-share)}
	// Reset: the current count weighs until the end of the next window.
	end := (i + 1) * W
	if c > 0 {
		end += W
	}
	d.Reset = time.Duration(end - now.UnixNano())
	if d.Allowed {
		return d
	}
	d.Remaining = min(d.Remaining, cost-1)
	if cost > p.Limit {
		neverFits(&d, p.Window)
		return d
	}
	// RetryAfter: the first nanosecond at which it fits, found by search
	// (the estimate only falls with time).
	ok := func(t int64) bool {
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
		return cj+cost+prevShare(p, pj, j, time.Unix(0, t)) <= p.Limit
	}
	lo, hi := at.UnixNano(), (i+2)*W // ok(hi): nothing weighs any more
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	d.RetryAfter = time.Duration(hi - now.UnixNano())
	return d
}

func (m *slidingModel) allow(p *edgelimit.Policy, key string, cost int64, now time.Time) edgelimit.Decision {
	if !m.fits(p, key, cost, now) {
		return m.peek(p, key, cost, now)
	}
	s := m.st(p, key)
	i, _ := m.at(p, s, now)
	s.counts[i] += cost
	s.newest = max(s.newest, i)
	d := m.peek(p, key, 0, now)
	d.Allowed = true
	return d
}

func (m *slidingModel) refund(p *edgelimit.Policy, key string, cost int64, now time.Time) {
	s := m.st(p, key)
	i, _ := m.at(p, s, now)
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

// live returns the entries still in the window at now: stamped less than a
// window before now (entries stamped after now count too), oldest first.
func (m *logModel) live(p *edgelimit.Policy, key string, now time.Time) []logEntry {
	var out []logEntry
	tm, wms := msOf(now), int64(p.Window/time.Millisecond)
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

func (m *logModel) fits(p *edgelimit.Policy, key string, cost int64, now time.Time) bool {
	return cost <= p.Limit && sumUnits(m.live(p, key, now))+cost <= p.Limit
}

func (m *logModel) peek(p *edgelimit.Policy, key string, cost int64, now time.Time) edgelimit.Decision {
	live := m.live(p, key, now)
	used := sumUnits(live)
	expires := func(e logEntry) time.Duration {
		return time.Duration((e.ms+int64(p.Window/time.Millisecond))*1e6 - now.UnixNano())
	}
	d := edgelimit.Decision{Allowed: m.fits(p, key, cost, now), Limit: p.Limit, Window: p.Window,
		Remaining: max(0, p.Limit-used)}
	if len(live) > 0 {
		d.Reset = expires(live[len(live)-1])
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
	d.Reset = max(d.Reset, d.RetryAfter)
	return d
}

func (m *logModel) allow(p *edgelimit.Policy, key string, cost int64, now time.Time) edgelimit.Decision {
	if !m.fits(p, key, cost, now) {
		return m.peek(p, key, cost, now)
	}
	k := pk{p.Name, key}
	m.m[k] = append(m.m[k], logEntry{ms: msOf(now), units: cost})
	d := m.peek(p, key, 0, now)
	d.Allowed = true
	return d
}

// refund takes the units from the oldest entries in the window, all or
// nothing.
func (m *logModel) refund(p *edgelimit.Policy, key string, cost int64, now time.Time) {
	if sumUnits(m.live(p, key, now)) < cost {
		return
	}
	es := m.m[pk{p.Name, key}]
	order := make([]int, 0, len(es))
	tm, wms := msOf(now), int64(p.Window/time.Millisecond)
	for i, e := range es {
		if e.ms > tm-wms && e.units > 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(es[a].ms - es[b].ms) })
	for _, i := range order {
		take := min(es[i].units, cost)
		es[i].units -= take
		if cost -= take; cost == 0 {
			return
		}
	}
}

// --- gcra -------------------------------------------------------------------

// gcraModel keeps each key's theoretical arrival time.
type gcraModel struct {
	m map[pk]time.Time
}

// interval is the emission interval: the window divided by the limit,
// rounded up to a nanosecond.
func interval(p *edgelimit.Policy) time.Duration {
	return (p.Window + time.Duration(p.Limit) - 1) / time.Duration(p.Limit)
}

func (m *gcraModel) base(p *edgelimit.Policy, key string, now time.Time) (tat, base time.Time) {
	tat = m.m[pk{p.Name, key}]
	if tat.After(now) {
		return tat, tat
	}
	return tat, now
}

func (m *gcraModel) fits(p *edgelimit.Policy, key string, cost int64, now time.Time) bool {
	if p.Limit == 0 || cost > Capacity(p) {
		return false
	}
	_, base := m.base(p, key, now)
	return base.Add(time.Duration(cost)*interval(p)).Sub(now) <= time.Duration(Capacity(p))*interval(p)
}

func (m *gcraModel) peek(p *edgelimit.Policy, key string, cost int64, now time.Time) edgelimit.Decision {
	d := edgelimit.Decision{Allowed: m.fits(p, key, cost, now), Limit: p.Limit, Window: p.Window}
	if p.Limit == 0 {
		neverFits(&d, p.Window)
		return d
	}
	T, B := interval(p), Capacity(p)
	tat, base := m.base(p, key, now)
	d.Remaining = max(0, min(B, int64(now.Add(time.Duration(B)*T).Sub(base)/T)))
	if tat.After(now) {
		d.Reset = tat.Sub(now)
	}
	if d.Allowed {
		return d
	}
	d.Remaining = min(d.Remaining, cost-1)
	if cost > B {
		neverFits(&d, p.Window)
		return d
	}
	d.RetryAfter = base.Sub(now) - time.Duration(B-cost)*T
	d.Reset = max(d.Reset, d.RetryAfter)
	return d
}

func (m *gcraModel) allow(p *edgelimit.Policy, key string, cost int64, now time.Time) edgelimit.Decision {
	if !m.fits(p, key, cost, now) {
		return m.peek(p, key, cost, now)
	}
	_, base := m.base(p, key, now)
	m.m[pk{p.Name, key}] = base.Add(time.Duration(cost) * interval(p))
	d := m.peek(p, key, 0, now)
	d.Allowed = true
	return d
}

// refund moves the TAT back by cost intervals if it is at least that far
// ahead, else gives nothing back.
func (m *gcraModel) refund(p *edgelimit.Policy, key string, cost int64, now time.Time) {
	k := pk{p.Name, key}
	back := m.m[k].Add(-time.Duration(cost) * interval(p))
	if !back.Before(now) {
		m.m[k] = back
	}
}
