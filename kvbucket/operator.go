package kvbucket

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit"
)

// Reset forgets the usage of req.Key's bucket: it is full again from
// req.At (the Bucket's own clock if it has one; see Allow), under
// req.Limits, for every instance that reads it afterwards. The engine
// calls it for an operator (Engine.Reset) with the key's request as it
// would make it now.
//
// In the KV a reset is one strong read and one update of this region's
// part (the only one a region writes): its TAT is lowered so that this
// region's term of the bucket's TAT is the instant (a bucket full at
// req.At), and, across regions, what it counts as spent is lowered until
// no other region's term passes the instant either (the bucket's TAT is
// the largest of the terms; see the package documentation). Everything
// written after the
// reset's write lands counts against the full bucket; what the KV held
// when it landed is forgotten. This instance's unwritten spending is
// forgotten with it and its cached state is the reset's answer, so its
// next decision sees the full bucket. Another instance learns of the reset
// within one sync interval (its share ends, and a denial whose knowledge
// is a sync interval old is read again first); spending it made before
// the reset and had not written yet (at most what it spent within one sync
// interval) is written after it and counts against the full bucket: a
// reset is never undone by an earlier spend, but it may come back smaller
// by that much.
//
// Across regions, the reset forgets every region's spending as this
// region's replica holds it at the reset: spending of another region that
// has not reached this replica yet (its last replication lag) is replicated
// after it and counts against the full bucket, as an instance's unwritten
// spending does. A missing state is a full bucket already: Reset then
// writes nothing.
func (b *Bucket) Reset(ctx context.Context, req edgelimit.Request) error {
	if err := checkKey(req.Key); err != nil {
		return err
	}
	u, err := b.unitsOf(req.Limits)
	if err != nil {
		return err
	}
	if u == nil {
		u = &b.u // limit 0: nothing is spent under these limits, but the policy's may be
	}
	n := b.instant(req).UnixNano()
	key := b.prefix + req.Key
	t, err := b.kv.get(ctx, key, wire.Strong)
	if err != nil {
		return fmt.Errorf("kvbucket: reset: %w", err)
	}
	var v view
	v.own = t.Own
	v.setOthers(&b.u, t.Others)
	at := u.at(n)
	var spent int64
	if v.xoOK {
		// The other regions' terms, xo + W·(Spent_own + so), must not pass
		// n·L either: this region's Spent is lowered (below zero if need
		// be: the algebra only adds it) until they do not.
		if s := at.Sub(v.xo).Div(u.sw, false) - v.so; s < t.Own.Spent {
			spent = s - t.Own.Spent
		}
	}
	if t.Own.Has || spent != 0 {
		t, err = b.kv.update(ctx, key, wire.Update{
			HasCap: true, Cap: v.floorOf(u, at),
			Spent: spent,
			Epoch: epochOf(n, b.sync),
			TTL:   b.ttl(u, at, n),
		})
		if err != nil {
			return fmt.Errorf("kvbucket: reset: %w", err)
		}
	}
	s, h := b.cache.shard(req.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.find(req.Key, h); e != nil && e.known {
		// What this instance spent and did not write is before the reset:
		// forgotten. Its share was of the bucket before: the next decision
		// syncs, and is granted one of the full bucket.
		e.pend = op{}
		e.spent, e.spentFlight = wire.Wide{}, wire.Wide{}
		e.granted = false
		b.learn(e, t, n)
	}
	return nil
}

// Charge spends req.Units() tokens of req.Key's bucket at req's instant
// (see Allow) whether or not they fit: a cost known only after the
// response (charge: response, charge_status). The bucket may go into
// debt, by at most one bucket: a charge beyond that counts as one that
// leaves the bucket a full bucket short of empty (a TAT further ahead
// would be taken for a clock far ahead, and repaired; see MaxClockSkew).
// Requests are then denied until refill has repaid the debt, and their
// headers show r=0 with the wait. The Decision is the state after the
// charge, as for a request of one more token: allowed while one fits,
// Remaining 0 in debt; it carries no Receipt (a charge is not refunded).
//
// A charge is spent as an admission is, so it is as approximate across
// instances as every kv spend: with the key's share in the cache it is
// local and reaches the KV with the next sync (other instances see it
// within a sync interval); otherwise (a key new to this process, one in its
// first sync interval, NoCache) it is written at once, unconditionally.
// When that write fails, the error is returned and the charge stays in
// this instance's unwritten changes, written with the key's next write:
// a charge is not to be retried.
func (b *Bucket) Charge(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	if err := checkKey(req.Key); err != nil {
		return edgelimit.Decision{}, err
	}
	u, err := b.unitsOf(req.Limits)
	switch {
	case err != nil:
		return edgelimit.Decision{}, err
	case u == nil:
		return b.closedDecision(), nil
	}
	var d edgelimit.Decision
	if err := b.do(ctx, u, b.instant(req).UnixNano(), req.Key, req.Units(), opCharge, op{}, &d); err != nil {
		return edgelimit.Decision{}, err
	}
	return d, nil
}

// charge spends cost at n whether or not it fits, at most down to one
// bucket of debt, and reports the state after it in d: locally when e
// holds a share (the next sync writes it), else written at once. s.mu is
// held on entry and released on return.
func (b *Bucket) charge(ctx context.Context, u *units, s *shard, e *entry, n, cost int64, d *edgelimit.Decision) error {
	tat := wire.Max(b.local(e, n), u.at(n))
	room := u.limit(n).Add(u.bw).Sub(tat) // units down to one bucket of debt
	w := u.tokens(cost)
	if room.Less(w) {
		w = wire.Max(room, wire.Wide{})
	}
	c := u.spentOf(cost)
	if w.Sign() > 0 {
		sp := op{f: u.at(n), p: w, spent: min(c, w.Div(u.sw, true)), hasFloor: true, has: true}
		e.pend = e.pend.then(sp)
		b.markDirty()
		e.spent = e.spent.Add(w)
		if e.syncing {
			e.spentFlight = e.spentFlight.Add(w)
		}
	}
	if b.shareValid(e, n) || b.degraded(e, n) || e.syncing || e.inflight.Sign() != 0 || w.Sign() == 0 {
		u.now().peek(b.local(e, n), n, 1, d) // a charge's state: what fits now, no turn
		s.stats.Local++
		s.mu.Unlock()
		return nil
	}
	var none edgelimit.Decision
	if err := b.syncKey(ctx, u, s, e, n, 0, 0, false, &none); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u.now().peek(b.local(e, n), n, 1, d) // a charge's state: what fits now, no turn
	return nil
}

// Grant gives req.Key units tokens beyond its bucket's capacity, usable at
// once, until the instant until, or when until is zero for one fill time
// of the bucket under req.Limits (its window as the headers show it,
// w) from req's instant (see Allow); what is unused then lapses. An end
// that is not after req's instant is ErrGrant, as are units below 1 or
// above MaxTokens and limits in force of 0. A grant made while another is
// in force adds its units to it, and they last until the later end; Reset
// does not take them back.
//
// The grant pays for requests once the bucket cannot (it is spent after
// the bucket's tokens, never for a Charge). It is one item's fields in the
// KV, read with the key's state: the grant itself is one update (1 WRU),
// and each request it pays for is a conditional update that spends one of
// its tokens only if the grant still holds it, so no token of a grant is
// spent twice, however many instances share the key: in one region a
// grant of G admits at most G requests beyond the bucket's own (a grant
// paid admission costs one write, as a reservation does). The instance that
// grants honours it at once; another learns of it within one sync interval
// (a denial whose knowledge of the KV is that old is read again first). A
// refund of a request the grant paid for gives nothing back. Across
// regions a grant lives in the part of the region that made it and is
// spent only by that region's instances: grant in each region that should
// honour it.
func (b *Bucket) Grant(ctx context.Context, req edgelimit.Request, units int64, until time.Time) error {
	if err := checkKey(req.Key); err != nil {
		return err
	}
	if units < 1 || units > MaxTokens {
		return fmt.Errorf("%w: policy %q: %d units (want 1 to %d)", ErrGrant, b.name(), units, int64(MaxTokens))
	}
	u, err := b.unitsOf(req.Limits)
	switch {
	case err != nil:
		return err
	case u == nil:
		return fmt.Errorf("%w: policy %q: the limit in force is 0, which admits nothing a grant could pay for", ErrGrant, b.name())
	}
	now := b.instant(req)
	n := now.UnixNano()
	end := until.UnixNano()
	switch {
	case until.IsZero():
		_, w := u.p.Advertised()
		end = n + int64(w)
		if end < n {
			end = math.MaxInt64
		}
	case !until.After(now):
		return fmt.Errorf("%w: policy %q: the grant's end %s is not after its instant %s", ErrGrant, b.name(),
			until.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	t, err := b.kv.update(ctx, b.prefix+req.Key, wire.Update{
		Grant: units, GrantUntil: end, GrantAt: n,
		Epoch: epochOf(n, b.sync),
		TTL:   satAdd(time.Duration(end-n), b.ttl(u, u.at(n), n)),
	})
	if err != nil {
		return fmt.Errorf("kvbucket: grant: %w", err)
	}
	s, h := b.cache.shard(req.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.find(req.Key, h); e != nil && e.known {
		b.learn(e, t, n)
	}
	return nil
}

// name is the policy's name.
func (b *Bucket) name() string { return b.prefix[:len(b.prefix)-1] }

// grantUsable reports whether the grant e knows of pays for cost tokens at
// n. s.mu is held.
func (b *Bucket) grantUsable(e *entry, n, cost int64) bool {
	return e.grantEnd > n && e.v.own.GrantLeft >= max(cost, 1)
}

// withGrant makes the denial d of cost at n allowed when the grant of p
// pays for it (Peek's answer), counting the grant in Remaining.
func withGrant(p wire.Part, n, cost int64, d *edgelimit.Decision) {
	if d.Allowed || p.GrantUntil <= n || p.GrantLeft < max(cost, 1) {
		return
	}
	d.Allowed, d.RetryAfter = true, 0
	countGrant(p, d)
}

// countGrant adds the grant of p (in force) to what d says remains,
// within the quota the client is told.
func countGrant(p wire.Part, d *edgelimit.Decision) {
	d.Remaining = min(d.Remaining+max(p.GrantLeft, 0), d.Limit)
}

// grantReceiptID names this Bucket and the key of hash h in the receipt of
// a request a grant paid for: Refund gives such a one nothing back.
func (b *Bucket) grantReceiptID(h uint64) [16]byte {
	id := b.receiptID(h)
	id[0] ^= 1
	return id
}

// spendGrant pays for cost tokens at n from the grant in force, with a
// conditional update that applies only if the grant holds them, and fills
// d from its answer. s.mu is held on entry and released on return.
func (b *Bucket) spendGrant(ctx context.Context, u *units, s *shard, e *entry, n, cost int64, d *edgelimit.Decision) error {
	cost = max(cost, 1)
	up := wire.Update{
		GrantSpend: cost, GrantAt: n,
		Epoch: epochOf(n, b.sync),
		TTL:   max(b.ttl(u, b.local(e, n), n), time.Duration(e.v.own.GrantUntil-n)),
	}
	s.stats.Synced++
	s.mu.Unlock()
	t, err := b.kv.update(ctx, b.kvKey(e), up)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.stats.Errors++
		e.degradedUntil = n + b.sync
		return err
	}
	b.learn(e, t, n)
	*d = edgelimit.Decision{}
	if !t.Applied {
		s.stats.Rejected++
		if u.decide(b.local(e, n), n, cost, d) {
			d.Allowed = false // the bucket never pays what the grant was asked for
			d.RetryAfter = max(d.Reset, time.Nanosecond)
		}
		return nil
	}
	s.stats.Writes++
	u.report(u.avail(b.local(e, n), n), d)
	d.Allowed = true
	countGrant(t.Own, d)
	d.Receipt = edgelimit.Receipt{At: n, Slot: cost, ID: b.grantReceiptID(e.hash)}
	return nil
}
