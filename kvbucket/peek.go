package kvbucket

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit"
)

// Refund and Peek: giving back what a decision spent, and deciding
// without spending; receipts name what was spent.

// Refund gives back what d spent and refill has not brought back since: d
// is the allowed Decision that Allow (or AllowAt) of this Bucket returned
// for req (the same Limits), and of the c tokens of its Receipt, spent at
// s, a refund at req's instant r (see Allow) gives back c less what the
// bucket refilled in between, c − (r − s)·Limit/Window, never less than
// nothing and never beyond capacity. At the decision's own instant (the
// engine refunds as of the request's instant) that is all of it. A spend's
// effect on what a bucket holds decays at most at the refill rate, so a
// refund never gives back more than its decision took, whatever was spent
// or refunded since: one of an admission whose tokens came back long ago
// gives nothing. (Before, a refund gave back all c tokens at r: after the
// bucket had refilled and been spent again, it gave the new spending's
// tokens back.) In the KV it is an addition of minus those units to what
// this region spent, never more. A decision that spent nothing (denied, or
// degraded by the engine) refunds nothing. A receipt of another Bucket or
// key, or one that spent nothing, is ErrReceipt and changes nothing.
func (b *Bucket) Refund(ctx context.Context, req edgelimit.Request, d edgelimit.Decision) error {
	if err := checkKey(req.Key); err != nil {
		return err
	}
	if !d.Allowed || d.Degraded {
		return nil
	}
	_, h := b.cache.shard(req.Key)
	u, err := b.unitsOf(req.Limits)
	if err != nil {
		return err
	}
	if d.Receipt.ID == b.grantReceiptID(h) {
		return nil // a grant paid: its tokens are not given back
	}
	if d.Receipt.ID != b.receiptID(h) || d.Receipt.Slot < 1 || u == nil {
		return errNotSpentHere(b)
	}
	n := b.instant(req).UnixNano()
	back := u.owed(d.Receipt.At, n, d.Receipt.Slot)
	if back.Sign() == 0 {
		return nil
	}
	var none edgelimit.Decision
	return b.do(ctx, u, n, req.Key, 0, opRefund, u.refundUnits(n, back), &none)
}

// errNotSpentHere is the error of a receipt this bucket did not give.
func errNotSpentHere(b *Bucket) error {
	return fmt.Errorf("%w: policy %q: the decision was not spent by this bucket for this key", ErrReceipt, b.prefix[:len(b.prefix)-1])
}

// RefundAt adds req.Units() tokens back to req.Key's bucket at now, never
// beyond capacity. With the key's share in the cache the refund is local
// and reaches the KV with the next sync (or, if the key is dropped from the
// cache first, before it is dropped); otherwise (a key this process does
// not know, one in its first sync interval, NoCache) it is written at once.
// Refund, which takes the tokens from the decision's receipt, is the
// engine's way in.
func (b *Bucket) RefundAt(ctx context.Context, now time.Time, req edgelimit.Request) error {
	if err := checkKey(req.Key); err != nil {
		return err
	}
	u, err := b.unitsOf(req.Limits)
	if err != nil || u == nil {
		return err
	}
	n := now.UnixNano()
	var none edgelimit.Decision
	return b.do(ctx, u, n, req.Key, 0, opRefund, u.refund(n, req.Units()), &none)
}

// Peek tells whether req would be allowed at its instant (see Allow), and
// the bucket's state, without spending anything. See PeekAt.
func (b *Bucket) Peek(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	return b.PeekAt(ctx, b.instant(req), req)
}

// PeekAt tells whether req would be allowed at now, and the bucket's
// state, without spending anything and without writing to the KV or adding
// the key to the cache. It answers from the state Allow would decide from:
// a key with a current share (or in its first sync interval, or whose KV
// failed a moment ago) from its local state, without a KV call; any other
// with one KV read (strongly consistent for a key this process does not
// know) merged with this instance's unwritten changes. A denial it reports
// is one Allow would give at that instant (the local state can only
// overstate the bucket); an allowed answer reports the state without req
// (Remaining is what is left now), carries no Receipt and is not to be
// refunded.
func (b *Bucket) PeekAt(ctx context.Context, now time.Time, req edgelimit.Request) (edgelimit.Decision, error) {
	d, own, grants, err := b.peekBucket(ctx, now, req)
	if err == nil && grants {
		withGrant(own, now.UnixNano(), req.Units(), &d)
	}
	return d, err
}

// peekBucket is PeekAt of the bucket alone: its answer, without the
// grant, and this region's part of the key, whose grant counts when
// grants is true.
func (b *Bucket) peekBucket(ctx context.Context, now time.Time, req edgelimit.Request) (d edgelimit.Decision, own wire.Part, grants bool, err error) {
	if err := checkKey(req.Key); err != nil {
		return edgelimit.Decision{}, wire.Part{}, false, err
	}
	u, err := b.unitsOf(req.Limits)
	switch {
	case err != nil:
		return edgelimit.Decision{}, wire.Part{}, false, err
	case u == nil:
		return b.closedDecision(), wire.Part{}, false, nil
	}
	n, cost := now.UnixNano(), req.Units()
	s, h := b.cache.shard(req.Key)
	s.mu.Lock()
	e := s.find(req.Key, h)
	if e != nil && e.known && (e.syncing || b.degraded(e, n) || b.shareValid(e, n) || b.through(e, n) && !b.stale(e, n)) {
		b.peekLocal(u, e, n, cost, &d)
		own, grants = e.v.own, !b.degraded(e, n)
		s.stats.Local++
		s.mu.Unlock()
		return d, own, grants, nil
	}
	c := wire.Strong
	if e != nil && e.known {
		c = wire.Eventual
	}
	s.stats.Synced++
	s.stats.Reads++
	s.mu.Unlock()

	t, err := b.kv.get(ctx, b.prefix+req.Key, c)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.stats.Errors++
		return edgelimit.Decision{}, wire.Part{}, false, err
	}
	var v view
	v.own = t.Own
	v.setOthers(&b.u, t.Others)
	tat := v.tat(&b.u)
	if e = s.find(req.Key, h); e != nil && e.known {
		// The read may or may not hold what a sync in flight writes:
		// count it, as Allow would.
		tat = b.withInflight(e, e.pend.apply(e.flight.apply(tat)), n)
	}
	u.peek(tat, n, cost, &d)
	return d, t.Own, true, nil
}

// peekLocal answers a peek from e's local state, as Allow would decide.
// s.mu is held.
func (b *Bucket) peekLocal(u *units, e *entry, n, cost int64, d *edgelimit.Decision) {
	u.peek(b.local(e, n), n, cost, d)
	if d.Allowed && !b.degraded(e, n) && !b.through(e, n) && e.insts > 1 {
		// The share limits this instance too.
		var sd edgelimit.Decision
		if !b.withinShare(u, e, n, cost, &sd) {
			*d = sd
		} else {
			d.Delay = max(d.Delay, sd.Delay)
		}
	}
}

// withInflight returns tat with the write-throughs of e in flight spent
// at n. s.mu is held.
func (b *Bucket) withInflight(e *entry, tat wire.Wide, n int64) wire.Wide {
	if e.inflight.Sign() == 0 {
		return tat
	}
	return wire.Max(tat, b.u.at(n)).Add(e.inflight)
}

// local returns the bucket's TAT as this instance knows it at n: what the
// KV last said, with what a sync in flight writes, this instance's
// unwritten changes and the reservations in flight. s.mu is held.
func (b *Bucket) local(e *entry, n int64) wire.Wide {
	if !e.busy {
		return e.pend.apply(e.tat)
	}
	return b.withInflight(e, e.pend.apply(e.flight.apply(e.tat)), n)
}

// receipt records that cost tokens of the key of hash h were spent at n
// for the turn delay later.
func (b *Bucket) receipt(n, cost int64, delay time.Duration, h uint64) edgelimit.Receipt {
	return edgelimit.Receipt{At: turnAt(n, delay), Slot: cost, ID: b.receiptID(h)}
}

// turnAt is a receipt's instant: the turn of a spend at n that waits
// delay (max_delay). Refill brings back a waiting spend's tokens only
// from its turn on (the spends before it are refilled first), so a refund
// before then (a wait cut short) gives all of them back, and one after it
// what refill has not brought back since the turn.
func turnAt(n int64, delay time.Duration) int64 { return n + int64(delay) }

// receiptID names this Bucket and the key of hash h in a receipt.
func (b *Bucket) receiptID(h uint64) [16]byte {
	var id [16]byte
	binary.LittleEndian.PutUint64(id[:8], b.id)
	binary.LittleEndian.PutUint64(id[8:], h)
	return id
}
