package durablecounter

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit"
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
// One item per key, gcra#<policy>#<keyhash>, with the TAT in Unix
// nanoseconds. DynamoDB has no max(), so the decision takes one of two
// conditional updates, chosen by this instance's last view of the TAT, and
// the condition checks that choice:
//
//	idle (TAT <= t):  SET tat = :t_plus_cT  if attribute_not_exists(tat) OR tat <= :t
//	busy (TAT > t):   SET tat = tat + :cT   if tat > :t AND tat <= :t_plus_burst_minus_c_T
//
// No read precedes either. Concurrent requests on a busy key all take the
// busy update, which commutes, so they never conflict; a wrong choice (a key
// that turned busy since this instance last saw it, or one that went idle)
// fails its condition, ALL_OLD returns the TAT, and the other update is sent
// (two calls). The TAT only ever grows, except by a refund.
type gcra struct {
	prefix string
	limit  int64
	window int64
	burst  int64
	// T is the emission interval; tau = burst*T the tolerance.
	T, tau int64
}

// maxTolerance bounds burst*T, so that TAT arithmetic never overflows.
const maxTolerance = int64(1) << 60

func newGCRA(p params) algorithm {
	a := &gcra{prefix: "gcra#" + p.name + "#", limit: p.limit, window: int64(p.window), burst: p.burst}
	if p.limit > 0 {
		a.T = (a.window + p.limit - 1) / p.limit
		a.tau = a.burst * a.T
	}
	return a
}

func (a *gcra) itemFor(key string, shard int32, _ int64) itemID {
	return itemID{prefix: a.prefix, key: key, slot: noSlot, shard: shard}
}

func (a *gcra) capacity() int64 { return a.burst }

func (a *gcra) tat(s *state) int64 {
	if !s.exists {
		return 0
	}
	return s.n
}

func (a *gcra) fits(s state, t, cost int64) bool {
	if a.limit == 0 || cost > a.burst {
		return false
	}
	return max(a.tat(&s), t)-t <= (a.burst-cost)*a.T
}

func (a *gcra) commit(s state, t, cost int64) state {
	return state{exists: true, n: max(a.tat(&s), t) + cost*a.T}
}

func (a *gcra) giveBack(s state, t, cost int64) (state, bool) {
	if !s.exists || s.n-cost*a.T < t {
		return s, false
	}
	s.n -= cost * a.T
	return s, true
}

func (a *gcra) decision(s state, t, cost int64, allowed bool) edgelimit.Decision {
	d := edgelimit.Decision{Allowed: allowed, Limit: a.limit, Window: time.Duration(a.window)}
	if a.limit == 0 {
		denyNever(&d, time.Duration(a.window))
		return d
	}
	tat := a.tat(&s)
	base := max(tat, t)
	d.Remaining = max(0, min(a.burst, (t+a.tau-base)/a.T))
	d.Reset = time.Duration(max(0, tat-t)) // until the bucket is full
	if allowed {
		return d
	}
	d.Remaining = min(d.Remaining, cost-1)
	if cost > a.burst {
		denyNever(&d, time.Duration(a.window))
		return d
	}
	d.RetryAfter = time.Duration(max(1, base-t-(a.burst-cost)*a.T))
	d.Reset = max(d.Reset, d.RetryAfter)
	return d
}

func (a *gcra) unknown(_, _ int64, allowed bool) edgelimit.Decision {
	d := edgelimit.Decision{Allowed: allowed, Limit: a.limit, Window: time.Duration(a.window),
		Reset: time.Duration(max(a.tau, 1))}
	if !allowed {
		d.RetryAfter = d.Reset
	}
	return d
}

func (a *gcra) expiry(s state, t int64) int64 {
	if !s.exists {
		return t
	}
	return s.n // from then on the bucket is full: as if absent
}

func (a *gcra) compact(s state, _ int64) state { return state{exists: s.exists, n: s.n} }

func (a *gcra) update(view state, t, cost int64, margin time.Duration, u *ddbUpdate) {
	if a.limit == 0 || cost > a.burst {
		u.readOnly = true
		return
	}
	u.name("#t", "tat")
	u.value(":t", t)
	if view.exists && view.n > t {
		u.update = "SET #t = #t + :ct, expires_at = :e"
		u.cond = "#t > :t AND #t <= :lim"
		u.value(":ct", cost*a.T)
		u.value(":lim", t+(a.burst-cost)*a.T)
		u.value(":e", expSec(t+a.tau+int64(margin))) // the TAT can be at most t + tau
	} else {
		tat := t + cost*a.T
		u.update = "SET #t = :nt, expires_at = :e"
		u.cond = "attribute_not_exists(#t) OR #t <= :t"
		u.value(":nt", tat)
		u.value(":e", expSec(tat+int64(margin)))
	}
	u.ret = types.ReturnValueUpdatedNew
}

func (a *gcra) decode(item map[string]types.AttributeValue, _ int64) (state, error) {
	tat, ok, err := attrInt(item, "tat")
	if err != nil || !ok {
		return state{}, err
	}
	return state{exists: true, n: tat}, nil
}

func (a *gcra) refundUpdate(view state, t, cost int64, u *ddbUpdate) bool {
	u.name("#t", "tat")
	u.update = "SET #t = #t - :ct"
	u.cond = "#t >= :min"
	u.value(":ct", cost*a.T)
	u.value(":min", t+cost*a.T)
	return true
}

func (a *gcra) blind(_, _ int64) (state, bool) { return state{}, false }

func (a *gcra) exact() bool { return false }

func (a *gcra) needsView() bool { return true }

func (a *gcra) refundUsesView() bool { return false }
