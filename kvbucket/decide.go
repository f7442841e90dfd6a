package kvbucket

import (
	"context"
	"fmt"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit"
)

// How a request is decided: from the cache where its state proves the
// answer, else through the KV (a first read, a reservation, a re-read of
// a stale denial).

// opKind is what a call does to a key's bucket.
type opKind uint8

const (
	opAllow  opKind = iota // decide, spending when allowed
	opRefund               // give tokens back
	opFlush                // write back what the KV does not know, then drop the entry
	opCharge               // spend whether or not it fits
)

// degraded reports that a store call of e failed less than a sync interval
// ago: e is decided from its local state alone until then, so that a broken
// KV costs one error per key per sync interval.
func (b *Bucket) degraded(e *entry, n int64) bool {
	return n < e.degradedUntil && n > e.degradedUntil-2*b.sync
}

// through reports that e's admissions are written through (a conditional
// reservation each): with NoCache, and during e's first sync interval in
// this process, while it cannot know how many instances share the key.
func (b *Bucket) through(e *entry, n int64) bool {
	return b.noCache || n-e.firstAt < b.sync && n-e.firstAt > -b.sync
}

// shareValid reports whether e holds a share granted after its probation
// that may still be spent at n: for a sync interval after the grant, and
// while the sync that renews it is in flight.
func (b *Bucket) shareValid(e *entry, n int64) bool {
	if !e.granted {
		return false
	}
	if e.syncing {
		return true
	}
	since := n - e.grantAt
	return since < b.sync && since > -b.sync
}

// budget returns the units e's share allows in all at n under u, times
// insts: R + (n − grantAt)·Limit, R being what the bucket held at the
// grant (at least 0), read under u's capacity.
func (b *Bucket) budget(u *units, e *entry, n int64) wire.Wide {
	return wire.Max(u.avail(e.grantTAT, e.grantAt), wire.Wide{}).Add(u.at(max(n-e.grantAt, 0)))
}

// withinShare reports whether cost more tokens at n fit e's share; when
// they do not, it fills d with the denial (Remaining and the waits counted
// in the share, bounded by when the next sync may renew it). With max_delay
// (u.dl) the share holds its part of the turns beyond the bucket too, D·L
// units shared by insts as the refill is: a request beyond the share but
// within that is allowed, and d.Delay is its turn in the share (which
// grows by Limit/insts units a nanosecond). s.mu is held.
func (b *Bucket) withinShare(u *units, e *entry, n, cost int64, d *edgelimit.Decision) bool {
	if e.insts <= 1 {
		return true
	}
	need := u.tokens(cost)
	total := b.budget(u, e, n)
	used := mulK(e.spent.Add(need), e.insts)
	if !total.Less(used) {
		return true
	}
	if !total.Add(u.dl).Less(used) {
		d.Delay = u.dur(used.Sub(total))
		return true
	}
	// left is this instance's share left, in units, times insts.
	left := total.Sub(mulK(e.spent, e.insts))
	d.Limit, d.Window = u.advQ, u.advW
	d.Remaining = 0
	var k int64
	if left.Sign() > 0 {
		k = left.Div(u.w, false) / e.insts
		d.Remaining = min(k, u.p.Capacity)
	}
	// The share grows by Limit units a nanosecond, shared by insts.
	nextTok := u.dur(mulK(u.tokens(k+1), e.insts).Sub(left))
	fit := u.dur(used.Sub(total))
	untilSync := time.Duration(max(e.grantAt+b.sync-n, 1))
	if e.syncing {
		untilSync = time.Nanosecond
	}
	d.Reset = max(min(nextTok, untilSync), time.Nanosecond)
	d.RetryAfter = max(min(fit, untilSync), d.Reset, time.Nanosecond)
	return false
}

// mulK returns w×k for k ≥ 1, w of either sign.
func mulK(w wire.Wide, k int64) wire.Wide {
	if w.Sign() < 0 {
		return w.Neg().MulSmall(k).Neg()
	}
	return w.MulSmall(k)
}

// do decides cost tokens of key at n under u (opAllow), into d (which is
// zero), or gives back rf (opRefund). On an error d is to be ignored.
func (b *Bucket) do(ctx context.Context, u *units, n int64, key string, cost int64, o opKind, rf op, d *edgelimit.Decision) error {
	s, h := b.cache.shard(key)
	var victim *entry
	defer func() {
		if victim != nil {
			// Making room for key chose an entry with spending the KV does
			// not know yet: write it back before dropping it. This
			// request's own decision is made first, so that a slow or
			// failed write-back cannot fail it: the write-back gets what is
			// left of the request's budget (ctx), and its failure is not
			// this request's.
			b.flush(ctx, s, victim, n)
		}
	}()
	for {
		s.mu.Lock()
		e, v := s.lookup(key, h, n)
		if v != nil {
			victim = v
		}
		if !e.known {
			if e.syncing {
				// The first read of this key is in flight: its answer is
				// the only state there is.
				w := e.wait
				s.mu.Unlock()
				if err := wait(ctx, w); err != nil {
					return fmt.Errorf("kvbucket: wait for the first read of %q: %w", b.prefix+key, err)
				}
				continue
			}
			if err := b.firstRead(ctx, s, e, n); err != nil {
				return err
			}
			continue
		}
		var w chan struct{}
		var err error
		switch o {
		case opRefund:
			return b.refund(ctx, u, s, e, n, rf)
		case opCharge:
			return b.charge(ctx, u, s, e, n, cost, d)
		default:
			w, err = b.allow(ctx, u, s, e, n, cost, d)
		}
		if w == nil {
			return err
		}
		// A write-through of this key is in flight: its answer decides
		// this request too, most often from the local state (a bucket it
		// emptied denies without a call).
		if err := wait(ctx, w); err != nil {
			return fmt.Errorf("kvbucket: wait for the write of %q: %w", b.prefix+key, err)
		}
		*d = edgelimit.Decision{}
	}
}

// wait waits for w to close or ctx to end. A channel closed already (a
// refresh's answer) does not ask ctx for its Done channel: the engine's
// budget context starts a timer the first time it is asked, which a
// decision from memory never needs.
func wait(ctx context.Context, w chan struct{}) error {
	select {
	case <-w:
		return nil
	default:
	}
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// firstRead reads the state of a key this process holds none for (new to
// it, or dropped from the cache), strongly consistent: an eventually
// consistent read just after this instance's own write could return an
// older, fuller state. s.mu is held on entry and released on return.
func (b *Bucket) firstRead(ctx context.Context, s *shard, e *entry, n int64) error {
	e.syncing = true
	e.wait = make(chan struct{})
	s.stats.Synced++
	s.stats.Reads++
	s.mu.Unlock()
	t, err := b.kv.get(ctx, b.kvKey(e), wire.Strong)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer b.endSync(e)
	if err != nil {
		s.stats.Errors++
		return err
	}
	e.known, e.firstAt = true, n
	b.learn(e, t, n)
	return nil
}

// learn takes what the KV answered at n into e's view (the later state of
// each part wins; see view.learn). s.mu is held.
func (b *Bucket) learn(e *entry, t wire.Tally, n int64) {
	e.v.learn(&b.u, t)
	e.tat = e.v.tat(&b.u)
	e.learnedAt = max(e.learnedAt, n)
	e.hasOwn = e.v.own.Has
	if e.hasOwn {
		e.ownTAT = e.v.own.TAT.Add(b.u.spentUnits(e.v.so))
	}
	e.grantEnd = 0
	if e.v.own.GrantLeft > 0 {
		e.grantEnd = e.v.own.GrantUntil
	}
}

// stale reports that what e knows of the KV is a sync interval old or more
// at n: a denial it proves may have been undone since, by another
// instance's Reset or Grant, so it is checked with a read first.
func (b *Bucket) stale(e *entry, n int64) bool {
	return n-e.learnedAt >= b.sync || e.learnedAt-n > b.sync
}

// refreshed is the channel allow returns after a refresh: closed, so that
// the request is decided again at once, from what was read.
var refreshed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// refresh reads e's state (strongly consistent) because a denial its
// local state proves is stale, and takes it in. On a failed read the
// denial stands (in d) and the key is not read again for a sync interval.
// s.mu is held on entry and released on return; it reports whether the
// read succeeded.
func (b *Bucket) refresh(ctx context.Context, s *shard, e *entry, n int64) bool {
	e.refreshing = true
	s.stats.Synced++
	s.stats.Reads++
	s.mu.Unlock()
	t, err := b.kv.get(ctx, b.kvKey(e), wire.Strong)
	s.mu.Lock()
	defer s.mu.Unlock()
	e.refreshing = false
	// Counted from n, not the latest instant: a clock behind the one that
	// learned last (more than a sync interval) would otherwise read again
	// for ever.
	e.learnedAt = n
	if err != nil {
		s.stats.Errors++
		return false
	}
	b.learn(e, t, n)
	e.learnedAt = n
	return true
}

// allow decides a request of cost at n for the known entry e. s.mu is held
// on entry and released on return. A non-nil channel means the request
// must wait for the write-through in flight to end, then be decided again.
func (b *Bucket) allow(ctx context.Context, u *units, s *shard, e *entry, n, cost int64, d *edgelimit.Decision) (chan struct{}, error) {
	// What is in flight counts as spent until its answer comes.
	tat := b.local(e, n)
	if !u.decide(tat, n, cost, d) {
		// The local state can only overstate what the bucket holds (but
		// for an operator's Reset or Grant since it was learned): the KV
		// would deny too. Unwritten changes still go out once a sync is
		// due, a state from a clock far ahead is repaired, and a state a
		// sync interval old is read again before it denies.
		//
		// The checks read the entry's first three cache lines only (see
		// entry): insane reads the copy of the view's own part kept there,
		// and inflight, a line of its own, is read only for a busy entry.
		if !e.syncing && !b.shareValid(e, n) && !b.degraded(e, n) && !e.reserving() {
			if insane := b.insane(u, e, n); e.pend.has || insane {
				// The write's answer is the bucket's fresh state (with an
				// operator's Reset or Grant in it): the request is decided
				// again from it.
				*d = edgelimit.Decision{}
				if err := b.syncKey(ctx, u, s, e, n, 0, cost, insane, d); err != nil {
					return nil, err
				}
				if !d.Allowed {
					s.mu.Lock()
					usable := b.grantUsable(e, n, cost)
					s.mu.Unlock()
					if !usable {
						return nil, nil
					}
				}
				return refreshed, nil
			}
			if !e.refreshing && b.stale(e, n) {
				if b.refresh(ctx, s, e, n) {
					return refreshed, nil
				}
				return nil, nil // the read failed: the local denial stands
			}
		}
		if !b.degraded(e, n) && b.grantUsable(e, n, cost) {
			// Beyond the bucket, an operator's grant pays: one
			// conditional write per request, so that no token of it is
			// spent twice.
			return nil, b.spendGrant(ctx, u, s, e, n, cost, d)
		}
		s.stats.Local++
		s.mu.Unlock()
		return nil, nil
	}
	switch {
	case b.degraded(e, n):
		// The KV failed a moment ago: decide as if alone until the next
		// attempt is due.
		b.spendLocal(u, e, n, cost, d)
	case b.through(e, n) || !b.shareValid(e, n) && e.syncing:
		*d = edgelimit.Decision{}
		if e.pend.has && !e.syncing {
			return nil, b.syncKey(ctx, u, s, e, n, cost, cost, false, d)
		}
		if w := e.writing; w != nil {
			// One write-through at a time per key: a cold burst at one
			// instance costs the KV one conditional write per admission
			// (and one that finds the bucket empty), not one per request.
			s.mu.Unlock()
			return w, nil
		}
		return nil, b.writeThrough(ctx, u, s, e, n, cost, d)
	case b.shareValid(e, n):
		var sd edgelimit.Decision
		if !b.withinShare(u, e, n, cost, &sd) {
			*d = sd
			break
		}
		d.Delay = max(d.Delay, sd.Delay) // the later turn: the bucket's or the share's
		b.spendLocal(u, e, n, cost, d)
	default:
		*d = edgelimit.Decision{}
		return nil, b.syncKey(ctx, u, s, e, n, cost, cost, false, d)
	}
	s.stats.Local++
	s.mu.Unlock()
	return nil, nil
}

// spendLocal spends cost at n from e's local state (which allows it) into
// d. s.mu is held.
func (b *Bucket) spendLocal(u *units, e *entry, n, cost int64, d *edgelimit.Decision) {
	w := u.tokens(cost)
	e.pend.thenSpend(u.at(n), w, u.spentOf(cost))
	b.markDirty()
	if e.syncing {
		e.spentFlight = e.spentFlight.Add(w)
	}
	e.spent = e.spent.Add(w)
	if e.insts > 1 && !b.degraded(e, n) {
		// Remaining counts in the share as well as in the bucket.
		var sd edgelimit.Decision
		if !b.withinShare(u.now(), e, n, d.Remaining+1, &sd) && sd.Remaining < d.Remaining {
			d.Remaining, d.Reset = sd.Remaining, sd.Reset
		}
	}
	d.Receipt = edgelimit.Receipt{At: turnAt(n, d.Delay), Slot: cost, ID: b.receiptID(e.hash)}
	if e.grantEnd > n {
		countGrant(e.v.own, d)
	}
}

// insane reports that this region's part of e is far ahead of n (more
// than MaxClockSkew beyond a bucket spent empty twice over and the turns
// of max_delay, the bucket
// being the deepest of the limits this Bucket decided under: a TAT written
// under a tier with more room is a debt under one with less, not a clock
// ahead): written by a clock far ahead, it is repaired (set to an empty
// bucket at n) rather than waited out. s.mu is held.
func (b *Bucket) insane(u *units, e *entry, n int64) bool {
	if !e.hasOwn {
		return false
	}
	own := e.ownTAT // e.v.own.TAT + W·e.v.so (u's W of Part.Spent is the policy's)
	deepest := wire.Max(u.bw, u.at(b.maxFill.Load())).Add(u.dl)
	return u.limit(n).Add(deepest).Add(u.at(int64(MaxClockSkew))).Less(own)
}

// ttl is how long the KV must keep a part after an update at n that leaves
// the bucket at tat: until it has drained, then a full refill more (for
// what other instances spent meanwhile: the longer of u's and the
// policy's), and a second for clock skew.
func (b *Bucket) ttl(u *units, tat wire.Wide, n int64) time.Duration {
	return satAdd(satAdd(u.dur(tat.Sub(u.at(n))), max(u.fill(), b.u.fill())), time.Second)
}

// update completes an Update of e's view with this instance's registration
// and the part's lifetime. s.mu is held.
func (b *Bucket) update(u *units, e *entry, o op, n int64, conditional bool) wire.Update {
	up := e.v.update(u, o, n, conditional)
	if e.granted && e.insts > 1 && n-e.grantAt < 2*b.sync {
		// Others spent this key a sync interval ago: a view that has
		// refilled since is most likely behind their spending, so the add
		// goes first (a raise guessed wrong costs a second call).
		up.RaiseFirst = false
	}
	up.Writer = b.writer
	up.Epoch = epochOf(n, b.sync)
	up.Stale = e.v.stale(up.Epoch)
	up.TTL = b.ttl(u, o.apply(e.tat), n)
	return up
}
