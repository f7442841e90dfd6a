package kvbucket

import (
	"context"

	"github.com/edgelimit/edgelimit"
)

var _ edgelimit.Settler = (*Bucket)(nil)

// Settle settles the reservation that the allowed decision d spent for req
// (req.Units() tokens) with what the request really cost, after the
// response: a cost below the reservation gives the difference back, less
// what refill has brought back of the reservation since (as Refund does),
// and a cost above it charges the excess whether or not it fits (as Charge
// does, at req's instant). Both are local to this instance like every kv
// spend, and reach the KV with the key's next sync: the bound a kv policy
// keeps across instances (its own spending exact, the others' seen within
// a sync interval) holds for settlements as for admissions, and on one
// instance requests whose costs do not exceed their reservations spend no
// more than the bucket, costs above them at most their excesses beyond
// it. A reservation a grant paid for is not given back (a grant's tokens
// never are); its excess is charged to the bucket.
func (b *Bucket) Settle(ctx context.Context, req edgelimit.Request, d edgelimit.Decision, cost int64) (edgelimit.Decision, error) {
	if err := checkKey(req.Key); err != nil {
		return edgelimit.Decision{}, err
	}
	reserved := req.Units()
	switch {
	case cost < 0:
		cost = 0
	case cost == reserved:
		return d, nil
	}
	part := req
	if cost > reserved {
		part.Cost = cost - reserved
		return b.Charge(ctx, part)
	}
	if !d.Allowed || d.Degraded {
		return d, nil
	}
	part.Cost = reserved - cost
	_, h := b.cache.shard(req.Key)
	u, err := b.unitsOf(req.Limits)
	if err != nil || u == nil {
		return d, err
	}
	if d.Receipt.ID == b.grantReceiptID(h) {
		return d, nil
	}
	if d.Receipt.ID != b.receiptID(h) || d.Receipt.Slot < 1 {
		return edgelimit.Decision{}, errNotSpentHere(b)
	}
	n := b.instant(req).UnixNano()
	back := u.owed(d.Receipt.At, n, d.Receipt.Slot)
	if w := u.tokens(part.Cost); w.Less(back) {
		back = w
	}
	if back.Sign() > 0 {
		var none edgelimit.Decision
		if err := b.do(ctx, u, n, req.Key, 0, opRefund, u.refundUnits(n, back), &none); err != nil {
			return edgelimit.Decision{}, err
		}
	}
	d.Remaining = min(d.Remaining+part.Cost, max(d.Limit, d.Remaining))
	d.Receipt = edgelimit.Receipt{}
	return d, nil
}
