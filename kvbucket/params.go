package kvbucket

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/edgelimit/edgelimit"
)

// TokenScale is the number of nanotokens in one token. A State counts its
// tokens in nanotokens so that refill is integer arithmetic: a bucket that
// refills Limit tokens per Window gains exactly
// elapsed × Limit × TokenScale / Window nanotokens, rounded down.
const TokenScale = 1_000_000_000

// MaxTokens bounds Params.Capacity and Params.Limit, so that no nanotoken
// count overflows an int64.
const MaxTokens = 1_000_000_000

// MaxClockSkew is how far in the future a state may be stamped and still be
// honoured. For Params, a State stamped later than now (another instance's
// clock runs ahead, or this one went back) gains nothing until the clock
// catches up; one stamped more than MaxClockSkew ahead is re-stamped now,
// keeping its tokens. For a Bucket, whose state is a theoretical arrival
// time, a clock ahead's spending counts until the others catch up, and this
// region's part more than MaxClockSkew beyond a bucket spent empty twice
// over is repaired to an empty bucket at the reader's instant. Either way, a
// clock that once jumped forward cannot freeze a bucket.
const MaxClockSkew = time.Minute

// State is what a KV stores for one bucket: two numbers. The bucket held
// Tokens nanotokens (TokenScale per token) at the instant At (Unix
// nanoseconds). Refill is computed when the state is read, so an idle bucket
// costs nothing; a missing state is a full bucket.
type State struct {
	Tokens int64
	At     int64
}

// Time returns At as a time.Time.
func (s State) Time() time.Time { return time.Unix(0, s.At) }

// Params are the numbers of one token bucket: it holds at most Capacity
// tokens and refills Limit tokens per Window, continuously. The methods are
// the pure algorithm, with the instant passed in (like golang.org/x/time/rate's
// AllowN(t, n)): they read no clock and touch no storage.
type Params struct {
	Capacity int64
	Limit    int64
	Window   time.Duration
}

// Validate reports whether p describes a bucket the arithmetic can hold:
// Capacity and Limit between 1 and MaxTokens, Window positive.
func (p Params) Validate() error {
	switch {
	case p.Capacity < 1 || p.Capacity > MaxTokens:
		return fmt.Errorf("%w: capacity %d is not between 1 and %d", ErrConfig, p.Capacity, MaxTokens)
	case p.Limit < 1 || p.Limit > MaxTokens:
		return fmt.Errorf("%w: limit %d is not between 1 and %d", ErrConfig, p.Limit, MaxTokens)
	case p.Window <= 0:
		return fmt.Errorf("%w: window %s is not positive", ErrConfig, p.Window)
	}
	return nil
}

// Full returns a full bucket at now: what a missing or expired state means.
func (p Params) Full(now time.Time) State {
	return State{Tokens: p.Capacity * TokenScale, At: now.UnixNano()}
}

// StateAt returns s refilled up to now. Tokens outside [0, Capacity] (a
// corrupt or foreign state) are clamped into it. A state stamped after now
// gains nothing and keeps its stamp (see MaxClockSkew).
func (p Params) StateAt(s State, now time.Time) State {
	return p.refill(s, now.UnixNano())
}

// TakeAt decides a request of cost tokens against s at now. When the bucket
// holds cost tokens they are spent and the new state is returned; otherwise
// s is returned unchanged. The Decision carries Limit and Window as the
// client is told them (Capacity over the time the bucket takes to fill, see
// Advertised), Remaining (whole tokens left), Reset (draft-11's effective
// window: the time until the next whole token comes back, see NextToken)
// and, when denied, RetryAfter (time until cost tokens are there, never
// shorter than Reset). A cost above Capacity can never be admitted: it is
// denied with RetryAfter = Window (or Reset, if that is longer). A cost
// below 1 counts as 1. (A denial returns s re-stamped instead when s was
// stamped beyond MaxClockSkew, so that refill can start.)
func (p Params) TakeAt(s State, now time.Time, cost int64) (State, edgelimit.Decision) {
	n := now.UnixNano()
	var d edgelimit.Decision
	st, ok := p.take(p.refill(s, n), n, cost, &d)
	if !ok && !restamped(s, n) {
		return s, d
	}
	return st, d
}

// Advertised returns the quota a client is told for this bucket
// (RateLimit-Policy's q and w): its capacity, over the time it takes to
// fill from empty. 10 per second with a capacity of 20 is 20 per 2s, so
// that Remaining never exceeds the quota announced. A bucket whose capacity
// is its limit announces Limit per Window. (The engine computed this from
// the policy until the limiter's Decision carried it, with the same
// arithmetic; a window too long for a Duration saturates.)
func (p Params) Advertised() (limit int64, window time.Duration) {
	if p.Capacity == p.Limit || p.Limit <= 0 {
		return p.Limit, p.Window
	}
	w := float64(p.Window) * float64(p.Capacity) / float64(p.Limit)
	if w >= math.MaxInt64 {
		return p.Capacity, time.Duration(math.MaxInt64)
	}
	return p.Capacity, time.Duration(w)
}

// NextToken returns draft-11's effective window of s at now: the time
// within which the client can use no more than the whole tokens s holds,
// which is the time until it holds one more. A full bucket gains no more:
// for it, the time one token takes to come back after a spend (one
// emission interval, Window / Limit rounded up; later if s is stamped in
// the future).
func (p Params) NextToken(s State, now time.Time) time.Duration {
	n := now.UnixNano()
	return p.nextToken(p.refill(s, n), n)
}

// restamped reports whether s is stamped so far after n that reading it at
// n re-stamps it (see MaxClockSkew).
func restamped(s State, n int64) bool {
	return s.At > n && s.At-n > int64(MaxClockSkew)
}

// RefundAt gives cost tokens back to s at now, never beyond Capacity. A
// cost below 1 counts as 1.
func (p Params) RefundAt(s State, now time.Time, cost int64) State {
	return p.add(p.refill(s, now.UnixNano()), cost)
}

// TimeToFull returns how long s takes to refill completely, counted from
// now: zero for a full bucket.
func (p Params) TimeToFull(s State, now time.Time) time.Duration {
	n := now.UnixNano()
	r := p.refill(s, n)
	return p.untilTokens(r, n, p.Capacity*TokenScale)
}

// refill is StateAt on Unix nanoseconds.
func (p Params) refill(s State, n int64) State {
	capN := p.Capacity * TokenScale
	tokens := min(max(s.Tokens, 0), capN)
	at := s.At
	switch {
	case restamped(s, n):
		return State{Tokens: tokens, At: n}
	case at >= n:
		return State{Tokens: tokens, At: at}
	}
	if gain := p.gain(uint64(n - at)); gain >= uint64(capN-tokens) {
		tokens = capN
	} else {
		tokens += int64(gain)
	}
	return State{Tokens: tokens, At: n}
}

// gain returns the nanotokens a bucket gains in elapsed nanoseconds,
// rounded down (saturating).
func (p Params) gain(elapsed uint64) uint64 {
	return mulDiv(elapsed, uint64(p.Limit)*TokenScale, uint64(p.Window), false)
}

// untilTokens returns how long after n the (already refilled) state r holds
// want nanotokens.
func (p Params) untilTokens(r State, n int64, want int64) time.Duration {
	wait := time.Duration(max(r.At-n, 0))
	if r.Tokens >= want {
		return wait
	}
	d := mulDiv(uint64(want-r.Tokens), uint64(p.Window), uint64(p.Limit)*TokenScale, true)
	if d > math.MaxInt64-uint64(wait) {
		return time.Duration(math.MaxInt64)
	}
	return wait + time.Duration(d)
}

// take decides cost against the refilled state r at n, into d (which
// is zero). ok reports whether the tokens were spent; the returned State is
// then r minus cost. (The decision is filled in place: it is the hot path
// of a cached decision, and a Decision is large to copy.)
func (p Params) take(r State, n int64, cost int64, d *edgelimit.Decision) (State, bool) {
	cost = max(cost, 1)
	need := cost * TokenScale
	if cost > p.Capacity || r.Tokens < need {
		p.decision(r, n, d)
		if cost > p.Capacity {
			d.RetryAfter = max(p.Window, d.Reset)
		} else {
			d.RetryAfter = max(p.untilTokens(r, n, need), d.Reset, time.Nanosecond)
		}
		return r, false
	}
	r.Tokens -= need
	p.decision(r, n, d)
	d.Allowed = true
	return r, true
}

// decision reports the refilled state r at n into d: the quota as
// advertised, the whole tokens left and the effective window. Allowed and
// RetryAfter are the caller's.
func (p Params) decision(r State, n int64, d *edgelimit.Decision) {
	d.Limit, d.Window = p.Limit, p.Window
	if p.Capacity != p.Limit {
		d.Limit, d.Window = p.Advertised()
	}
	d.Remaining = r.Tokens / TokenScale
	d.Reset = p.nextToken(r, n)
}

// nextToken is NextToken on the refilled state r at n.
func (p Params) nextToken(r State, n int64) time.Duration {
	capN := p.Capacity * TokenScale
	if r.Tokens >= capN {
		// Full: after a spend, the token comes back in one emission
		// interval.
		r.Tokens = capN - TokenScale
		return p.untilTokens(r, n, capN)
	}
	return p.untilTokens(r, n, (r.Tokens/TokenScale+1)*TokenScale)
}

// add puts cost tokens (at least 1) back into r, never beyond Capacity.
func (p Params) add(r State, cost int64) State {
	cost = max(cost, 1)
	capN := p.Capacity * TokenScale
	if cost >= p.Capacity || r.Tokens >= capN-cost*TokenScale {
		r.Tokens = capN
		return r
	}
	r.Tokens += cost * TokenScale
	return r
}

// mulDiv returns a×b/c rounded down (or up), saturating at MaxInt64. c > 0.
func mulDiv(a, b, c uint64, up bool) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, c)
	if up && rem != 0 {
		q++
	}
	return min(q, math.MaxInt64)
}
