package limitertest

import (
	"math/big"
	"time"

	"github.com/edgelimit/edgelimit"
)

// tokenBucketModel is the reference token bucket of strategy kv, exact:
// the bucket refills L tokens per W continuously, holds at most B, and
// each key's state is its theoretical arrival time in bucket units, where
// an instant of n nanoseconds is n·L units and a token W units, so that
// every quantity is an integer (the rate L/W need not divide a
// nanosecond). It decides as gcra does, but with the exact rate instead of
// an emission interval rounded to a nanosecond, at the request's own
// instant, and it refunds by the decay rule below.
type tokenBucketModel struct {
	m map[pk]*big.Int // TAT in units; absent: a full bucket
}

func bigOf(v int64) *big.Int { return big.NewInt(v) }

// tb holds one policy's numbers in bucket units.
type tb struct {
	p       *Spec
	l, w, b *big.Int // L, W (ns), B
	bw      *big.Int // B·W: a full bucket
}

func tbOf(p *Spec) tb {
	t := tb{p: p, l: bigOf(p.Limit), w: bigOf(int64(p.Window)), b: bigOf(Capacity(p))}
	t.bw = new(big.Int).Mul(t.b, t.w)
	return t
}

// at is the instant now in units.
func (t tb) at(now time.Time) *big.Int { return new(big.Int).Mul(bigOf(now.UnixNano()), t.l) }

// tokens is c tokens in units.
func (t tb) tokens(c int64) *big.Int { return new(big.Int).Mul(bigOf(c), t.w) }

// avail is what a bucket of TAT tat holds at now, in units: at most B·W,
// negative for one spent beyond empty.
func (t tb) avail(tat *big.Int, now time.Time) *big.Int {
	nl := t.at(now)
	base := nl
	if tat != nil && tat.Cmp(nl) > 0 {
		base = tat
	}
	a := new(big.Int).Add(nl, t.bw)
	return a.Sub(a, base)
}

// dur is how long the bucket takes to gain x units (L a nanosecond),
// rounded up to a nanosecond; 0 for x <= 0.
func (t tb) dur(x *big.Int) time.Duration {
	if x.Sign() <= 0 {
		return 0
	}
	q, r := new(big.Int).QuoRem(x, t.l, new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, bigOf(1))
	}
	return time.Duration(q.Int64())
}

// report fills Remaining and Reset of a bucket holding a units: the whole
// tokens, and the time until the next whole token comes back (for a full
// bucket, one emission interval: the time a token spent now takes).
func (t tb) report(a *big.Int, d *edgelimit.Decision) {
	var k int64
	if a.Sign() > 0 {
		k = new(big.Int).Quo(a, t.w).Int64()
	}
	d.Remaining = min(k, Capacity(t.p))
	if a.Cmp(t.bw) >= 0 {
		d.Reset = t.dur(t.w)
		return
	}
	d.Reset = t.dur(new(big.Int).Sub(t.tokens(k+1), a))
}

func (m *tokenBucketModel) fits(p *Spec, key string, cost int64, now time.Time) bool {
	if p.Limit == 0 || cost > Capacity(p) {
		return false
	}
	t := tbOf(p)
	return t.avail(m.m[pk{p.Name, key}], now).Cmp(t.tokens(cost)) >= 0
}

func (m *tokenBucketModel) peek(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision {
	d := decision(p, m.fits(p, key, cost, now))
	if p.Limit == 0 {
		d.Reset = p.Window
		neverFits(&d, p.Window)
		return d
	}
	t := tbOf(p)
	a := t.avail(m.m[pk{p.Name, key}], now)
	t.report(a, &d)
	switch {
	case d.Allowed:
	case cost > Capacity(p):
		neverFits(&d, p.Window)
	default:
		d.RetryAfter = max(t.dur(new(big.Int).Sub(t.tokens(cost), a)), d.Reset, time.Nanosecond)
	}
	return d
}

func (m *tokenBucketModel) allow(p *Spec, key string, cost int64, now time.Time) edgelimit.Decision {
	if !m.fits(p, key, cost, now) {
		return m.peek(p, key, cost, now)
	}
	t := tbOf(p)
	k := pk{p.Name, key}
	tat := t.at(now)
	if old := m.m[k]; old != nil && old.Cmp(tat) > 0 {
		tat = old
	}
	m.m[k] = tat.Add(tat, t.tokens(cost))
	d := decision(p, true)
	t.report(t.avail(m.m[k], now), &d)
	d.Receipt = edgelimit.Receipt{At: now.UnixNano(), Slot: cost}
	return d
}

// refund gives back what of the decision's tokens has not come back by
// refill since it was spent: of c tokens spent at s, min(c·W, s·L + c·W −
// r·L) units at the refund's instant r, never beyond a full bucket. One
// spend's effect on what the bucket holds decays at most at the refill
// rate, so this never gives back more than the spend took, whatever was
// spent or refunded since; at the spend's own instant (the engine's case)
// it gives back all of it. (gcra's refund, which knows the spend's slot of
// the emission schedule, can give back more when the bucket was not full
// at the spend.)
func (m *tokenBucketModel) refund(p *Spec, key string, cost int64, now time.Time, d edgelimit.Decision) {
	if !spent(d) {
		return
	}
	t := tbOf(p)
	k := pk{p.Name, key}
	tat := m.m[k]
	if tat == nil {
		return
	}
	back := new(big.Int).Sub(new(big.Int).Add(t.at(at(d)), t.tokens(cost)), t.at(now))
	if c := t.tokens(cost); back.Cmp(c) > 0 {
		back = c
	}
	if back.Sign() <= 0 {
		return
	}
	tat.Sub(tat, back)
	if nl := t.at(now); tat.Cmp(nl) < 0 {
		tat.Set(nl)
	}
}
