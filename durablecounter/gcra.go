package durablecounter

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// gcra is the generic cell rate algorithm: a token bucket of capacity burst
// that refills limit units per window, kept as one number, the theoretical
// arrival time (TAT): when the bucket will be full again. With the emission
// interval T = window / limit (rounded up to a nanosecond, so the rate is
// never above the policy's) and the tolerance burst*T, a request of cost c
// at t is admitted if
//
//	max(TAT, t) + c*T - t <= burst*T
//
// and then TAT becomes max(TAT, t) + c*T. That is nginx's limit_req with
// burst and nodelay: up to burst requests pass at once, then one every T;
// nothing is queued or delayed (a Lambda cannot hold a request), and a
// request beyond the burst is denied with RetryAfter the time until it
// fits. (nginx counts the burst beyond the one request the rate allows:
// its `burst=b nodelay` is our burst b+1.)
//
// The state is the TAT (n), the instant its latest writer decided at (at),
// the bucket's period (p: a random number, new whenever a request finds
// the bucket full) and the time refunds gave back in the period (r). A
// request is decided at te = max(its clock, at) (instant): two requests
// reaching an idle key at once used to deny the one whose clock was a
// moment earlier, by that moment, although a token was left. Its item and
// conditional updates are in gcra_item.go.
//
// This is one of the project's two GCRAs; they differ on purpose. This one
// decides every request with a conditional write against the stored TAT,
// so each spend sees the true state and int64 nanoseconds suffice: T is
// rounded up to a nanosecond (the rate never above the policy's), once per
// spend, and the condition keeps the count exact. kvbucket's
// (kvbucket/gcra.go, on the 128-bit Wide of kvbucket/wide.go) changes a
// TAT only by commutative updates, adds and raises that compose many
// instances' spends written without seeing the state, so its arithmetic
// itself must be exact: an instant is n×Limit bucket units, beyond 64 bits.
//
// A spending of c units at te occupies the slot [TAT - cT, TAT) of the
// emission schedule that the TAT ends: the units come back, in that order,
// as time passes the slot. A refund as of tr removes what of the slot is
// still to come at tr: all of it, cT, when tr is the instant of the spend
// (the engine refunds as of the request's instant), less if part of it has
// passed. Refunds of earlier slots move the later ones forward, so the
// refund bounds where its slot is now by the refunds made since the spend
// (z then minus z now) and by te + cT, and takes only what certainly is
// still to come: never more than removing the request from the schedule
// would, and all of it when no other refund came in between
// (TestGCRARefundNeverOverGives). A refund as of the spend's instant that
// lands a moment later also gives back what of the slot came back in that
// moment, if the slot was then at the head of the schedule: at most that
// moment's worth. The period check keeps a refund from taking units of a
// later period.
//
// With max_delay D (the policy's; delay below), a request that does not fit
// the tolerance but would fit it within D is admitted for its turn:
//
//	max(TAT, t) + c*T - t <= burst*T + D
//
// TAT moves on at once, as for any admission, and the decision's Delay is
// the time until the request conforms, TAT - burst*T - t: the request is
// served then (the engine waits), and a request arriving meanwhile is
// decided against the turns already reserved. That is nginx's limit_req
// without nodelay: `burst=B` (no nodelay) is our burst 1 with max_delay
// B*T, each request beyond the rate served one T after the one before it;
// `burst=B delay=d` is our burst d+1 with max_delay (B-d)*T.
type gcra struct {
	prefix string
	pid    uint32
	limit  int64
	window int64
	burst  int64
	// T is the emission interval; tau = burst*T the tolerance.
	T, tau int64
	// delay is max_delay: how far beyond tau a request may be admitted,
	// for a later turn.
	delay int64
}

// delayOf checks and keeps the policy's max_delay: only a gcra reserves a
// later turn, and only unsharded (a request waiting on one shard while
// another has room would wait for nothing).
func (c *Counter) delayOf(p *policy.Policy) error {
	if p.MaxDelay == 0 {
		return nil
	}
	switch {
	case p.MaxDelay < 0:
		return fmt.Errorf("%w: policy %q: max_delay %s is negative", ErrConfig, p.Name, p.MaxDelay)
	case c.alg != GCRA:
		return fmt.Errorf("%w: policy %q: max_delay applies only to algorithm gcra", ErrConfig, p.Name)
	case c.shards > 1:
		return fmt.Errorf("%w: policy %q: max_delay does not go with shards", ErrConfig, p.Name)
	}
	c.maxDelay = int64(p.MaxDelay)
	return nil
}

// maxTolerance bounds burst*T, so that TAT arithmetic never overflows.
const maxTolerance = int64(1) << 60

func newGCRA(p params) algorithm {
	prefix := "gcra#" + p.name + "#"
	a := &gcra{prefix: prefix, pid: prefixID(prefix), limit: p.limit, window: int64(p.window), burst: p.burst, delay: p.delay}
	if p.limit > 0 {
		a.T = (a.window + p.limit - 1) / p.limit
		a.tau = a.burst * a.T
	}
	return a
}

func (a *gcra) itemFor(key string, shard int32, _ int64) itemID {
	return itemID{prefix: a.prefix, pid: a.pid, key: key, slot: noSlot, shard: shard}
}

func (a *gcra) tat(s *state) int64 {
	if !s.exists {
		return 0
	}
	return s.n
}

func (a *gcra) instant(s state, t int64) int64 {
	if s.exists {
		return max(t, s.at)
	}
	return t
}

func (a *gcra) fits(s state, t, cost int64) bool {
	if a.limit == 0 || cost > a.burst {
		return false
	}
	te := a.instant(s, t)
	return max(a.tat(&s), te)-te <= (a.burst-cost)*a.T+a.delay
}

// newPeriod returns a new bucket period, a random number in [1, 2^47), so
// that it fits a Receipt's Slot above the shard.
func newPeriod() int64 { return rand.Int64N(1<<47-1) + 1 }

func (a *gcra) commit(s state, t, cost int64) state {
	te := a.instant(s, t)
	if !s.exists || s.n <= te { // full: a new period
		return state{exists: true, n: te + cost*a.T, p: newPeriod(), at: te}
	}
	s.n += cost * a.T
	s.at = te
	return s
}

func (a *gcra) receipt(s state, te, _ int64) edgelimit.Receipt {
	rc := edgelimit.Receipt{At: te, Slot: s.p << shardBits}
	putInt64(rc.ID[:8], s.n)
	putInt64(rc.ID[8:], s.r)
	return rc
}

// refundOut is what a refund as of tr of the spending rc records (cost
// units) gives back, given z, the time refunds gave back in the period by
// now: the part of its slot still to come, by the latest end the slot can
// have now. The slot ended at e when it was spent and has moved forward by
// at most what refunds gave back since (z - zk, counting those of later
// slots too, which do not move it); it never starts before te, the
// instant of the spend. zk < 0: unknown, only te bounds it.
func (a *gcra) refundOut(rc edgelimit.Receipt, z, tr, cost int64) int64 {
	te, e, zk := rc.At, getInt64(rc.ID[:8]), getInt64(rc.ID[8:])
	end := te + cost*a.T
	if zk >= 0 && z >= zk {
		end = max(end, e-(z-zk))
	}
	return min(cost*a.T, max(0, end-max(tr, te)))
}

func (a *gcra) giveBack(s state, rc edgelimit.Receipt, tr, cost int64) (state, bool) {
	if !s.exists || s.p != rc.Slot>>shardBits {
		return s, false // another period: the slot came back long ago
	}
	out := a.refundOut(rc, s.r, tr, cost)
	if out == 0 {
		return s, false
	}
	s.n -= out
	s.r += out
	return s, true
}

func (a *gcra) decision(s state, t, cost int64, allowed bool) edgelimit.Decision {
	d := edgelimit.Decision{Allowed: allowed}
	if a.limit == 0 {
		d.Reset = time.Duration(a.window)
		denyNever(&d, time.Duration(a.window))
		return d
	}
	te := a.instant(s, t)
	base := max(a.tat(&s), te)
	x := te + a.tau - base // the bucket's content, in time
	units := max(0, floorDiv(x, a.T))
	d.Remaining = min(a.burst, units)
	// Reset, the effective window: until the next unit comes back, which
	// for a full bucket is one emission interval (the time a unit spent
	// now takes to come back).
	d.Reset = time.Duration(te + (units+1)*a.T - x - t)
	if allowed {
		// Its turn: when the bucket, with the request in it, is back
		// within the tolerance (zero without max_delay).
		d.Delay = time.Duration(max(0, -x))
		return d
	}
	d.Remaining = min(d.Remaining, cost-1)
	if cost > a.burst {
		denyNever(&d, time.Duration(a.window))
		return d
	}
	// Until cost units are in the bucket: never sooner than the next one.
	d.RetryAfter = time.Duration(max(1, te+cost*a.T-x-t))
	return d
}

func (a *gcra) expiry(s state, t int64) int64 {
	if !s.exists {
		return t
	}
	return s.n // from then on the bucket is full: as if absent
}

func (a *gcra) compact(s state, _ int64) state {
	return state{exists: s.exists, n: s.n, p: s.p, r: s.r, at: s.at}
}

func (a *gcra) windowEnd(t int64) int64 { return t + a.window }

// parseMaxDelay refuses a durable policy's max_delay where it cannot be a
// turn: a window's count (fixed, sliding, log) has no schedule of turns to
// reserve one in, only a count of the window, so a waiting request could
// not be told when it fits; a sharded gcra would make a request wait on
// one shard while another has room.
func parseMaxDelay(f *policy.Fields, o *Options) {
	if f.Policy().MaxDelay == 0 {
		return
	}
	switch {
	case o.Algorithm != GCRA:
		f.Errorf("max_delay", "max_delay applies only to algorithm gcra: a %s keeps a count per window, not a schedule of turns, so it cannot reserve a unit for a later instant", o.Algorithm)
	case o.Shards > 1:
		f.Errorf("max_delay", "max_delay does not go with shards: a request could wait for a turn on one shard while another has room")
	}
}
