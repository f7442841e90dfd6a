package kvbucket

import (
	"context"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit"
)

// Writing back: a reservation that decides from the KV's answer, the
// periodic sync of a key's local spending, refunds, and the write-back of
// an evicted entry.

// writeThrough reserves cost at n in the KV with a conditional update
// that lands only if it fits, and decides from the answer. Several may be
// in flight for one key; each counts what the others reserve. s.mu is held
// on entry and released on return.
func (b *Bucket) writeThrough(ctx context.Context, u *units, s *shard, e *entry, n, cost int64, d *edgelimit.Decision) error {
	sp := u.spend(n, cost)
	if !u.decide(b.local(e, n), n, cost, d) {
		// What is in flight already holds the rest of the bucket.
		s.stats.Local++
		s.mu.Unlock()
		return nil
	}
	*d = edgelimit.Decision{}
	up := b.update(u, e, sp, n, true)
	e.inflight = e.inflight.Add(sp.p)
	e.setBusy()
	e.writing = make(chan struct{})
	s.stats.Synced++
	// This instance's unwritten spending ahead of this request: what it
	// admitted before. What it admits while the write is out counts this
	// request ahead of itself (e.inflight) and takes a later turn.
	ahead := e.pend
	s.mu.Unlock()

	t, err := b.kv.update(ctx, b.kvKey(e), up)
	s.mu.Lock()
	defer s.mu.Unlock()
	e.inflight = e.inflight.Sub(sp.p)
	e.setBusy()
	close(e.writing)
	e.writing = nil
	if err != nil {
		s.stats.Errors++
		e.degradedUntil = n + b.sync
		return err
	}
	b.learn(e, t, n)
	after := b.local(e, n)
	// The answer's own part (the view may hold a later one already), with
	// this instance's unwritten spending admitted before it (ahead): the
	// bucket just after this reservation, whose turn it is.
	ans := e.v
	ans.own = t.Own
	if t.Applied {
		s.stats.Writes++
		u.report(u.avail(after, n), d)
		d.Allowed = true
		// Never beyond max_delay: the KV's condition held the turn within
		// it without this instance's unwritten spending.
		d.Delay = min(u.turn(ahead.apply(ans.tat(u)), n), u.dur(u.dl))
		d.Receipt = b.receipt(n, cost, d.Delay, e.hash)
		if e.grantEnd > n {
			countGrant(e.v.own, d)
		}
		return nil
	}
	s.stats.Rejected++
	if u.decide(after, n, cost, d) {
		// The KV saw less than this answer shows (another write landed in
		// between): its word is final.
		d.Allowed = false
		d.RetryAfter = max(d.Reset, time.Nanosecond)
	}
	return nil
}

// syncKey writes e's unwritten changes and, with cost > 0, the request's
// spending at n in one unconditional update, learns the bucket's state
// from the answer, decides the request from it (undoing its reservation
// with the next write when it did not fit) and, after probation, grants
// this instance its share until the next sync. With cost 0 it only writes,
// and reports a denial of a request of report tokens (when report > 0):
// the one whose local denial found changes to write (allowed, with nothing
// spent, when the answer holds room for it after all). With repair it also
// lowers this region's part from a clock far ahead. s.mu is held on entry
// and released on return.
func (b *Bucket) syncKey(ctx context.Context, u *units, s *shard, e *entry, n, cost, report int64, repair bool, d *edgelimit.Decision) error {
	o := e.pend
	if cost > 0 {
		o = o.then(u.spend(n, cost))
	}
	snap := e.pend
	e.pend = op{}
	e.flight = o
	e.setBusy()
	e.syncing = true
	e.spentFlight = wire.Wide{}
	up := b.update(u, e, o, n, false)
	if repair {
		up.HasCap = true
		up.Cap = e.v.floorOf(u, u.limit(n))
	}
	s.stats.Synced++
	s.mu.Unlock()

	t, err := b.kv.update(ctx, b.kvKey(e), up)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer b.endSync(e)
	e.flight = op{}
	e.setBusy()
	if err != nil {
		s.stats.Errors++
		e.pend = snap.then(e.pend)
		b.markDirty()
		e.degradedUntil = n + b.sync
		return err
	}
	s.stats.Writes++
	b.learn(e, t, n)
	// Whether the request fit is the answer's own word: the view may
	// already hold a later state (a write-through that landed after it).
	ans := e.v
	ans.own = t.Own
	fits := cost > 0 && !u.admit(n).Less(ans.tat(u))
	fresh := b.withInflight(e, e.tat, n) // the bucket now, this request's reservation undone
	if cost > 0 && !fits {
		un := u.undo(cost)
		e.pend = un.then(e.pend)
		b.markDirty()
		fresh = un.apply(fresh)
	}
	if !b.through(e, n) {
		e.granted = true
		e.grantAt = n
		e.grantTAT = fresh
		e.insts = max(1, instances(epochOf(n, b.sync), t.Own.Writers, writersOf(t.Others)))
		// What was spent locally while the sync was in flight counts
		// against the new share.
		e.spent = e.spentFlight
		e.spentFlight = wire.Wide{}
	}
	switch {
	case fits:
		u.report(u.avail(fresh, n), d)
		d.Allowed = true
		d.Delay = u.turn(ans.tat(u), n)
		d.Receipt = b.receipt(n, cost, d.Delay, e.hash)
		if e.grantEnd > n {
			defer countGrant(e.v.own, d)
		}
		if e.granted && e.insts > 1 {
			// Remaining counts in the new share as well as in the bucket.
			var sd edgelimit.Decision
			if !b.withinShare(u, e, n, d.Remaining+1, &sd) && sd.Remaining < d.Remaining {
				d.Remaining, d.Reset = sd.Remaining, sd.Reset
			}
		}
	case report > 0:
		if u.decide(b.local(e, n), n, report, d) && cost > 0 {
			// The KV's answer is final: a reservation that did not fit.
			d.Allowed = false
			d.RetryAfter = max(d.Reset, time.Nanosecond)
		}
		// A write-back (cost 0) whose answer holds room for the request
		// (an operator's Reset or Grant since the key was learned) leaves
		// d allowed, spending nothing: the caller decides the request
		// again from the fresh state.
	}
	return nil
}

func writersOf(parts []wire.Part) []wire.Writer {
	var ws []wire.Writer
	for _, p := range parts {
		ws = append(ws, p.Writers...)
	}
	return ws
}

// refund gives cost tokens back at n: locally when e holds a share (the
// next sync writes it), else written at once. s.mu is held on entry and
// released on return.
func (b *Bucket) refund(ctx context.Context, u *units, s *shard, e *entry, n int64, rf op) error {
	if b.shareValid(e, n) || b.degraded(e, n) || e.syncing || e.inflight.Sign() != 0 {
		e.pend = e.pend.then(rf)
		e.spent = e.spent.Add(rf.p)
		b.markDirty()
		if e.syncing {
			e.spentFlight = e.spentFlight.Add(rf.p)
		}
		s.stats.Local++
		s.mu.Unlock()
		return nil
	}
	e.pend = e.pend.then(rf)
	var none edgelimit.Decision
	return b.syncKey(ctx, u, s, e, n, 0, 0, false, &none)
}

// flush writes back what the KV does not know of victim (marked syncing by
// evict) and drops it from the cache. When the write fails, or requests
// spent from it meanwhile, it stays, dirty, for a later eviction to try
// again: spending is never dropped unwritten.
func (b *Bucket) flush(ctx context.Context, s *shard, victim *entry, n int64) {
	s.mu.Lock()
	o := victim.pend
	victim.pend = op{}
	victim.flight = o
	victim.setBusy()
	up := b.update(&b.u, victim, o, n, false)
	up.Writer = 0 // a write-back holds no share: it registers nobody
	s.mu.Unlock()
	t, err := b.kv.update(ctx, b.kvKey(victim), up)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer b.endSync(victim)
	victim.flight = op{}
	victim.setBusy()
	if err != nil {
		// Counted in Stats.Errors; the entry stays.
		s.stats.Errors++
		victim.pend = o.then(victim.pend)
		b.markDirty()
		return
	}
	s.stats.Writes++
	s.stats.Flushed++
	b.learn(victim, t, n)
	if !victim.pend.has && victim.inflight.Sign() == 0 {
		// (A write-through in flight must land in this entry: a new one
		// for the key could read the KV before it lands.)
		s.remove(victim)
	}
}

// endSync marks e's sync finished and wakes waiters. s.mu is held.
func (b *Bucket) endSync(e *entry) {
	e.syncing = false
	if e.wait != nil {
		close(e.wait)
		e.wait = nil
	}
}
