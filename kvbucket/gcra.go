package kvbucket

import (
	"fmt"
	"math"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit"
)

// units are a bucket's numbers in bucket units: an instant of n nanoseconds
// is n×Limit units and one token is Window units, so that a bucket refilling
// Limit tokens per Window gains exactly one unit per nanosecond and all of
// its arithmetic is exact integer arithmetic. Its state is a theoretical
// arrival time, TAT (the GCRA's): the bucket at n holds
//
//	avail(n) = n·L + B·W − max(TAT, n·L)     units, at most B·W (full)
//
// and a spend of c tokens at n is TAT ← max(TAT, n·L) + c·W, allowed when
// avail(n) ≥ c·W. A TAT in the past is a full bucket: refill is computed,
// never written, and concurrent spends commute (they only add).
//
// This is one of the project's two GCRAs; they differ on purpose. Here a
// TAT changes only by commutative updates (adds and raises that compose
// many instances' spends, written without seeing the stored state), so no
// write can correct a rounding and the arithmetic itself must be exact:
// hence bucket units and the 128-bit [Wide]. durablecounter's
// (durablecounter/gcra.go) decides every spend with a conditional write
// against the stored TAT, in int64 nanoseconds with the emission interval
// rounded up, and its condition keeps the count exact.
//
// The scale is the policy's: an instant is n×Limit units whatever limits
// a request carries. A request whose limits are not the policy's (a tier,
// an override: edgelimit.Request.Limits) reads the same TAT with its own
// token, W'·L/L' units (see scaled): the TAT, an instant, is kept; what the
// bucket holds at it is re-read under the request's rate and capacity.
type units struct {
	p      Params
	l, w   int64     // units a nanosecond (the policy's Limit); units a token
	sw     int64     // units a token of Part.Spent (the policy's Window in ns)
	bw     wire.Wide // capacity in units
	emit   time.Duration
	advQ   int64
	advW   time.Duration
	window time.Duration
	// dl is max_delay in units (D·L): how far beyond the limit a request
	// may leave the TAT, admitted for its turn (zero: none).
	dl wire.Wide
}

func newUnits(p Params) units {
	u := units{p: p, l: p.Limit, w: int64(p.Window), sw: int64(p.Window), window: p.Window}
	u.bw = wire.Mul(p.Capacity, u.w)
	u.emit = time.Duration(wire.WideOf(u.w).Div(u.l, true))
	u.advQ, u.advW = p.Limit, p.Window
	if p.Capacity != p.Limit {
		u.advQ, u.advW = p.Advertised()
	}
	return u
}

// scaled returns the units of a bucket of p (a request's own limits) in
// u's scale: an instant is still n×u.l units, and a token of p, which
// refills in p.Window/p.Limit, is ⌈p.Window·u.l/p.Limit⌉ units: exact when
// p.Limit divides p.Window·u.l (a tier of 100 a minute on a policy of 10 a
// minute is 6·10^9 units a token), else at most one unit (1/u.l ns of
// refill) more. It fails for p outside Params.Validate's range, or for a
// token too long for the scale (beyond 2^63 units).
func (u *units) scaled(p Params) (units, error) {
	if err := p.Validate(); err != nil {
		return units{}, err
	}
	w := wire.Mul(int64(p.Window), u.l).Div(p.Limit, true)
	if w == math.MaxInt64 {
		return units{}, fmt.Errorf("%w: a token of %d per %s is beyond the policy's scale (its limit %d)", ErrConfig, p.Limit, p.Window, u.l)
	}
	t := units{p: p, l: u.l, w: w, sw: u.sw, window: p.Window, dl: u.dl}
	t.bw = wire.Mul(p.Capacity, w)
	t.emit = time.Duration(wire.WideOf(w).Div(t.l, true))
	t.advQ, t.advW = p.Limit, p.Window
	if p.Capacity != p.Limit {
		t.advQ, t.advW = p.Advertised()
	}
	return t, nil
}

// spentOf returns c of u's tokens as Part.Spent counts them (tokens of the
// policy's size), rounded up: a spend under other limits is counted no
// smaller than it is.
func (u *units) spentOf(c int64) int64 {
	if u.w == u.sw {
		return c
	}
	return wire.Mul(c, u.w).Div(u.sw, true)
}

// spentUnits returns s tokens of Part.Spent in units.
func (u *units) spentUnits(s int64) wire.Wide { return wire.Mul(s, u.sw) }

// at returns the instant n in units.
func (u *units) at(n int64) wire.Wide { return wire.Mul(n, u.l) }

// tokens returns c tokens in units.
func (u *units) tokens(c int64) wire.Wide {
	if c == 1 {
		return wire.WideOf(u.w) // Window ≥ 1ns
	}
	return wire.Mul(c, u.w)
}

// limit returns the highest TAT a bucket may hold at n: n·L + B·W.
func (u *units) limit(n int64) wire.Wide { return u.at(n).Add(u.bw) }

// admit returns the highest TAT an admission may leave at n: the limit,
// and with max_delay D the D·L units of turns beyond it.
func (u *units) admit(n int64) wire.Wide { return u.limit(n).Add(u.dl) }

// turn returns how long a request that left the bucket at tat at n waits
// for its turn: until the bucket is back within its capacity (zero when
// it is now).
func (u *units) turn(tat wire.Wide, n int64) time.Duration { return u.dur(tat.Sub(u.limit(n))) }

// now returns u without max_delay: the units of a decision that cannot
// wait (the state a Charge reports).
func (u *units) now() *units {
	if u.dl.Sign() == 0 {
		return u
	}
	c := *u
	c.dl = wire.Wide{}
	return &c
}

// avail returns the units the bucket of tat holds at n (≤ B·W; negative
// when it is over-spent).
func (u *units) avail(tat wire.Wide, n int64) wire.Wide {
	nl := u.at(n)
	return nl.Add(u.bw).Sub(wire.Max(tat, nl))
}

// decide fills d (which is zero) with the bucket's answer to a request of
// cost tokens at n against tat, and reports whether it is allowed. With
// max_delay a request the bucket holds no room for now but will within it
// is allowed for its turn (d.Delay): its tokens are spent now, taking the
// bucket below empty by at most D·L units, so that a request arriving
// while it waits is decided behind it.
func (u *units) decide(tat wire.Wide, n, cost int64, d *edgelimit.Decision) bool {
	cost = max(cost, 1)
	a := u.avail(tat, n)
	need := u.tokens(cost)
	if cost > u.p.Capacity || a.Add(u.dl).Less(need) {
		u.report(a, d)
		if cost > u.p.Capacity {
			d.RetryAfter = max(u.window, d.Reset)
		} else {
			d.RetryAfter = max(u.dur(need.Sub(a)), d.Reset, time.Nanosecond)
		}
		return false
	}
	left := a.Sub(need)
	u.report(left, d)
	d.Allowed = true
	if left.Sign() < 0 {
		d.Delay = u.dur(left.Neg())
	}
	return true
}

// peek fills d with the state at n and whether cost would be allowed,
// spending nothing.
func (u *units) peek(tat wire.Wide, n, cost int64, d *edgelimit.Decision) {
	if u.decide(tat, n, cost, d) {
		u.report(u.avail(tat, n), d)
	}
}

// report fills the quota, the whole tokens in a units and the effective
// window; Allowed and RetryAfter are the caller's.
func (u *units) report(a wire.Wide, d *edgelimit.Decision) {
	d.Limit, d.Window = u.advQ, u.advW
	var k int64
	if a.Sign() > 0 {
		k = a.Div(u.w, false)
	}
	d.Remaining = min(k, u.p.Capacity)
	if !a.Less(u.bw) {
		d.Reset = u.emit
	} else {
		d.Reset = u.dur(u.tokens(k + 1).Sub(a))
	}
}

// dur returns how long the bucket takes to gain x units (one a
// nanosecond), rounded up; saturating.
func (u *units) dur(x wire.Wide) time.Duration {
	if x.Sign() <= 0 {
		return 0
	}
	return time.Duration(x.Div(u.l, true))
}

// fill returns the time the bucket takes to fill from empty.
func (u *units) fill() time.Duration { return u.dur(u.bw) }

// op is a composed change of a TAT, tat ← max(tat, f) + p: a spend, a
// refund, an undone reservation, or several of them in order (ops compose
// in the max-plus algebra, so any sequence is one op). spent is the tokens
// it adds to Part.Spent.
type op struct {
	f, p     wire.Wide
	spent    int64
	hasFloor bool
	has      bool
}

// spend is a request of c tokens allowed at n.
func (u *units) spend(n, c int64) op {
	return op{f: u.at(n), p: u.tokens(c), spent: u.spentOf(c), hasFloor: true, has: true}
}

// refund gives c tokens back at n, never beyond capacity:
// tat ← max(tat − c·W, n·L) = max(tat, n·L + c·W) − c·W.
func (u *units) refund(n, c int64) op { return u.refundUnits(n, u.tokens(c)) }

// refundUnits gives w units back at n, never beyond capacity:
// tat ← max(tat − w, n·L). Part.Spent loses the whole tokens of w (a
// region's spending is never counted smaller than it is).
func (u *units) refundUnits(n int64, w wire.Wide) op {
	return op{f: u.at(n).Add(w), p: w.Neg(), spent: -w.Div(u.sw, false), hasFloor: true, has: true}
}

// owed returns the units of a spend of c tokens at `at` that refill has
// not brought back by n: c·W less what the bucket refilled since,
// min(c·W, at·L + c·W − n·L), and nothing once that is not positive. A
// spend's effect on what a bucket holds decays at most at the refill rate
// (the spends after it are the same with or without it; without it, the
// bucket only reaches full sooner), so giving back this much never gives
// back more than the spend took, whatever was spent or given back since.
func (u *units) owed(at, n, c int64) wire.Wide {
	w := u.tokens(c)
	if n <= at {
		return w
	}
	left := w.Sub(u.at(n - at))
	if left.Sign() < 0 {
		return wire.Wide{}
	}
	return left
}

// undo takes back a reservation of c tokens that did not fit.
func (u *units) undo(c int64) op {
	return op{f: wire.NegInf, p: u.tokens(c).Neg(), spent: -u.spentOf(c), has: true}
}

// thenSpend makes o the op o followed by a spend whose floor is f, units
// w and Part.Spent tokens c (u.spend(n, c) is f = n·L, w = c·W, c), in
// place: the hot path of a cached decision.
func (o *op) thenSpend(f, w wire.Wide, c int64) {
	if !o.has {
		*o = op{f: f, p: w, spent: c, hasFloor: true, has: true}
		return
	}
	if g := f.Sub(o.p); o.f.Less(g) {
		o.f = g
	}
	o.p = o.p.Add(w)
	o.spent += c
	o.hasFloor = true
}

// then returns o followed by x.
func (o op) then(x op) op {
	if !o.has {
		return x
	}
	if !x.has {
		return o
	}
	return op{
		f:        wire.Max(o.f, x.f.Sub(o.p)),
		p:        o.p.Add(x.p),
		spent:    o.spent + x.spent,
		hasFloor: o.hasFloor || x.hasFloor,
		has:      true,
	}
}

// apply returns tat after o.
func (o op) apply(tat wire.Wide) wire.Wide {
	if !o.has {
		return tat
	}
	return wire.Max(tat, o.f).Add(o.p)
}

// view is what an instance knows of a bucket's shared state: this region's
// part and a summary of the others'. The TAT of the whole bucket is
//
//	max over regions r of (TAT_r + W·(spent of every region but r))
//
// which for this region is own.TAT + W·so and for the others is at most
// xo + W·(own.Spent + so), with xo the largest TAT_r − W·spent_r. Its
// pointers come first (others, then own's Writers), as the cache entry
// keeps its own.
type view struct {
	others []wire.Part
	own    wire.Part
	xo     wire.Wide // max over the other regions of TAT_r − W·Spent_r
	xoOK   bool
	so     int64 // spent of the other regions
}

// learn takes an answer of the KV into v: each part replaces the known one
// unless that one is of a later version (answers of concurrent calls come
// back in any order).
func (v *view) learn(u *units, t wire.Tally) {
	if !v.own.Has || t.Own.Version >= v.own.Version {
		v.own = t.Own
	}
	if len(t.Others) > 0 {
		if len(v.others) != len(t.Others) {
			v.others = make([]wire.Part, len(t.Others))
		}
		for i, p := range t.Others {
			if !v.others[i].Has || p.Version >= v.others[i].Version {
				v.others[i] = p
			}
		}
	}
	v.setOthers(u, v.others)
}

// setOthers summarises the other regions' parts.
func (v *view) setOthers(u *units, others []wire.Part) {
	v.xo, v.xoOK, v.so = wire.NegInf, false, 0
	for _, p := range others {
		v.so += p.Spent
		if p.Has {
			x := p.TAT.Sub(u.spentUnits(p.Spent))
			if !v.xoOK || v.xo.Less(x) {
				v.xo, v.xoOK = x, true
			}
		}
	}
}

// tat returns the bucket's TAT (negInf for no state: a full bucket).
func (v *view) tat(u *units) wire.Wide {
	t := wire.NegInf
	if v.own.Has {
		t = v.own.TAT.Add(u.spentUnits(v.so))
	}
	if v.xoOK {
		t = wire.Max(t, v.xo.Add(u.spentUnits(v.own.Spent+v.so)))
	}
	return t
}

// floorOf returns the own part's floor for an op of floor f: raising
// TAT_own to f − W·so makes this region's term of the bucket's TAT f.
func (v *view) floorOf(u *units, f wire.Wide) wire.Wide { return f.Sub(u.spentUnits(v.so)) }

// update returns the Update that applies o to this region's part at n:
// unconditional, or (conditional) only if a request of cost fits at n.
func (v *view) update(u *units, o op, n int64, conditional bool) wire.Update {
	up := wire.Update{Add: o.p, Spent: o.spent}
	if o.hasFloor {
		up.Floor, up.HasFloor = v.floorOf(u, o.f), true
		up.RaiseFirst = !v.own.Has || v.own.TAT.Less(up.Floor)
	}
	if conditional {
		// The bucket's TAT after o must stay within the limit (with
		// max_delay, its turns beyond it): for this
		// region's term TAT_own + W·so + p ≤ limit, for the others'
		// xo + W·(spent_own + so) + p ≤ limit.
		room := u.admit(n).Sub(o.p).Sub(u.spentUnits(v.so))
		up.Conditional, up.MaxTAT = true, room
		if v.xoOK {
			up.MaxSpent, up.HasMaxSpent = room.Sub(v.xo).Div(u.sw, false), true
		}
	}
	return up
}

// stale returns the own part's writer epochs before epoch−1.
func (v *view) stale(epoch int64) []int64 {
	var out []int64
	for _, w := range v.own.Writers {
		if w.Epoch < epoch-1 {
			out = append(out, w.Epoch)
		}
	}
	return out
}

// instances counts the distinct writers of epochs e−1 and e over the
// parts: the instances that wrote the key in the last sync interval or two.
func instances(epoch int64, parts ...[]wire.Writer) int64 {
	var ids []uint32
	for _, ws := range parts {
		for _, w := range ws {
			if w.Epoch >= epoch-1 && w.Epoch <= epoch && !containsID(ids, w.ID) {
				ids = append(ids, w.ID)
			}
		}
	}
	return int64(len(ids))
}

func containsID(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// epochOf returns n's epoch: ⌊n / S⌋.
func epochOf(n, sync int64) int64 {
	e := n / sync
	if n < 0 && n%sync != 0 {
		e--
	}
	return e
}

// satAdd returns a+b, saturating.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
