package durablecounter

import (
	"context"
	"errors"
	"fmt"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// One operation on one item of the DynamoDB store: a decision (apply: one
// conditional update, again with the state a failure returned while only
// the view was out of date), a refund, a charge, a grant, a reset, reads.

func (s *dynamoStore) apply(ctx context.Context, op1 op) (result, error) {
	o := &op1
	pk := o.id.pk()
	view := s.view(o)
	for attempt := 1; ; attempt++ {
		u := s.update(o, view, false)
		if u.readOnly { // can never fit: read the state for the headers
			st, err := s.getItem(ctx, o, pk)
			if err != nil {
				return result{}, err
			}
			return s.denied(o, st), nil
		}
		item, err := s.conn.Update(ctx, pk, &u.Update)
		if err == nil {
			st, err := o.enc.decode(item, o.t)
			if err != nil {
				return result{}, fmt.Errorf("durablecounter: update %q: reply: %w", pk, err)
			}
			if !st.exists {
				return result{}, fmt.Errorf("durablecounter: update %q: reply has no state", pk)
			}
			s.remember(o, st)
			return result{ok: true, known: true, st: st, d: o.rule.decision(st, o.t, o.cost, true), rc: o.rule.receipt(st, u.at, o.cost)}, nil
		}
		var cf *wire.ConditionFailed
		if !errors.As(err, &cf) {
			return result{}, s.wrap("update", pk, err)
		}
		st, known, err := s.failed(o, pk, cf.Old, cf.ReadErr)
		switch {
		case err != nil:
			return result{}, err
		case !known:
			// An exact condition failed: a denial, whose state the read
			// after it could not fetch.
			return result{d: o.enc.unknown(o.t, o.cost, false)}, nil
		case o.enc.conditions().exact || !o.rule.fits(st, o.t, o.cost):
			return s.denied(o, st), nil
		}
		// The request fits the state that failed the condition: only the
		// view was out of date. Decide again with that state.
		if attempt == maxAttempts || ctx.Err() != nil {
			return result{}, fmt.Errorf("durablecounter: update %q: %w (%d conditional updates)", pk, ErrContention, attempt)
		}
		view = st
	}
}

// failed returns the state behind a failed condition, given the old item
// that came with the failure (or the error of the read that should have
// fetched it): its state, or a lower bound the failure alone proves
// (encoding.blind). known is false only for an exact algorithm whose old
// item is unknown: the denial stands without its state.
func (s *dynamoStore) failed(o *op, pk string, old wire.Item, readErr error) (st state, known bool, err error) {
	if old != nil {
		st, err := o.enc.decode(old, o.t)
		if err != nil {
			return state{}, false, fmt.Errorf("durablecounter: update %q: old item: %w", pk, err)
		}
		s.remember(o, st)
		return st, true, nil
	}
	if lb, ok := o.enc.blind(o.t, o.cost); ok {
		return lb, true, nil
	}
	if o.enc.conditions().exact {
		return state{}, false, nil
	}
	if readErr == nil {
		return state{}, false, fmt.Errorf("durablecounter: update %q: condition failed without the old item", pk)
	}
	return state{}, false, s.wrap("read", pk, readErr)
}

func (s *dynamoStore) denied(o *op, st state) result {
	return result{known: true, st: o.rule.compact(st, o.t), d: o.rule.decision(st, o.t, o.cost, false)}
}

// getItem returns the state of o's item with a strongly consistent read.
func (s *dynamoStore) getItem(ctx context.Context, o *op, pk string) (state, error) {
	item, err := s.conn.Get(ctx, pk)
	if err != nil {
		return state{}, s.wrap("read", pk, err)
	}
	st, err := o.enc.decode(item, o.t)
	if err != nil {
		return state{}, fmt.Errorf("durablecounter: read %q: %w", pk, err)
	}
	s.remember(o, st)
	return st, nil
}

func (s *dynamoStore) refund(ctx context.Context, op1 op, rc edgelimit.Receipt) (bool, error) {
	o := &op1
	pk := o.id.pk()
	var seen *state
	failures := 0
	for attempt := 1; ; attempt++ {
		var u condUpdate
		if !o.enc.refundUpdate(rc, seen, attempt, o.t, o.cost, &u) {
			return false, nil // nothing (left) to give back
		}
		// Only an algorithm whose guard can fail for a concurrent refund
		// looks at the item again.
		u.SkipOldRead = !o.enc.conditions().refundRaces
		_, err := s.conn.Update(ctx, pk, &u.Update)
		if err == nil {
			s.forget(o) // the view is out of date now
			return true, nil
		}
		var cf *wire.ConditionFailed
		if errors.As(err, &cf) {
			if !o.enc.conditions().refundRaces {
				return false, nil // the guard failed: nothing left to give back
			}
			// A concurrent refund changed what is left: look again.
			var st state
			switch {
			case cf.Old != nil:
				if st, err = o.enc.decode(cf.Old, o.t); err != nil {
					err = fmt.Errorf("durablecounter: refund %q: old item: %w", pk, err)
				}
			case cf.ReadErr != nil:
				err = s.wrap("read", pk, cf.ReadErr)
			default:
				st, err = s.getItem(ctx, o, pk)
			}
			if err != nil {
				if failures++; failures > maxRefundFailures || ctx.Err() != nil {
					return false, err
				}
				continue
			}
			seen = &st
			continue
		}
		if failures++; failures > maxRefundFailures || ctx.Err() != nil {
			return false, s.wrap("refund", pk, err)
		}
	}
}

func (s *dynamoStore) charge(ctx context.Context, op1 op) (result, error) {
	o := &op1
	pk := o.id.pk()
	view := s.view(o)
	for attempt := 1; ; attempt++ {
		var u condUpdate
		o.enc.chargeUpdate(view, o.t, o.cost, s.margin, &u)
		item, err := s.conn.Update(ctx, pk, &u.Update)
		if err == nil {
			st, err := o.enc.decode(item, o.t)
			if err != nil {
				return result{}, fmt.Errorf("durablecounter: charge %q: reply: %w", pk, err)
			}
			s.remember(o, st)
			return charged(o, st), nil
		}
		var cf *wire.ConditionFailed
		if !errors.As(err, &cf) {
			return result{}, s.wrap("charge", pk, err)
		}
		// A charge's condition fails only for the item's structure (a
		// sliding window moved on, gcra idle or busy): send it again from
		// the state the failure returned.
		var st state
		switch {
		case cf.Old != nil:
			st, err = o.enc.decode(cf.Old, o.t)
		case cf.ReadErr != nil:
			err = s.wrap("read", pk, cf.ReadErr)
		default:
			st, err = s.getItem(ctx, o, pk)
		}
		if err != nil {
			return result{}, err
		}
		if attempt == maxAttempts || ctx.Err() != nil {
			return result{}, fmt.Errorf("durablecounter: charge %q: %w (%d conditional updates)", pk, ErrContention, attempt)
		}
		view = st
	}
}

func (s *dynamoStore) grant(ctx context.Context, o op, units, end int64) error {
	g, ok := o.enc.(*grantPool)
	if !ok {
		return fmt.Errorf("durablecounter: grant on a %T item", o.enc)
	}
	pk := o.id.pk()
	us := g.grantUpdates(units, end, o.t, s.margin)
	for round := 1; ; round++ {
		for i := range us {
			_, err := s.conn.Update(ctx, pk, &us[i])
			if err == nil {
				return nil
			}
			var cf *wire.ConditionFailed
			if !errors.As(err, &cf) {
				return s.wrap("grant", pk, err)
			}
			if units == 0 {
				return nil // the marker ends later already
			}
		}
		// Another grant changed the item between the forms: try again.
		if round == maxAttempts || ctx.Err() != nil {
			return fmt.Errorf("durablecounter: grant %q: %w", pk, ErrContention)
		}
	}
}

func (s *dynamoStore) reset(ctx context.Context, ops []op) error {
	for i := range ops {
		o := &ops[i]
		pk := o.id.pk()
		if err := s.conn.Delete(ctx, pk); err != nil {
			return s.wrap("reset", pk, err)
		}
		s.forget(o)
	}
	return nil
}

func (s *dynamoStore) get(ctx context.Context, o op) (state, error) {
	return s.getItem(ctx, &o, o.id.pk())
}

func (s *dynamoStore) read(ctx context.Context, ops []op, out []state) error {
	if len(ops) == 1 {
		st, err := s.getItem(ctx, &ops[0], ops[0].id.pk())
		out[0] = st
		return err
	}
	pks := make([]string, len(ops))
	all := make([]int, len(ops))
	for i := range ops {
		pks[i], all[i] = ops[i].id.pk(), i
	}
	got, err := s.readAll(ctx, ops, pks, all)
	for i := range ops {
		out[i] = got[i]
	}
	return err
}

// readAll returns the states of the items of ops[i] for i in which
// (consistent reads, one BatchGetItem per 100 items, retrying unprocessed
// keys a few times). Items it could not read are missing from the map.
func (s *dynamoStore) readAll(ctx context.Context, ops []op, pks []string, which []int) (map[int]state, error) {
	out := make(map[int]state, len(which))
	byPK := make(map[string]int, len(which))
	for _, i := range which {
		byPK[pks[i]] = i
	}
	found := func(pk string, item wire.Item) {
		i, ok := byPK[pk]
		if !ok {
			return
		}
		st, err := ops[i].enc.decode(item, ops[i].t)
		if err != nil {
			delete(out, i)
			return
		}
		out[i] = st
		s.remember(&ops[i], st)
	}
	for len(which) > 0 {
		chunk := which[:min(len(which), wire.MaxBatchGet)]
		which = which[len(chunk):]
		keys := make([]string, len(chunk))
		for k, i := range chunk {
			keys[k] = pks[i]
			out[i] = state{} // absent unless returned
		}
		for round := 0; len(keys) > 0; round++ {
			if round == maxReadRounds {
				for _, pk := range keys {
					delete(out, byPK[pk])
				}
				return out, fmt.Errorf("durablecounter: read %d items: still unprocessed after %d rounds", len(keys), maxReadRounds)
			}
			left, err := s.conn.BatchGet(ctx, keys, found)
			if err != nil {
				for _, i := range chunk {
					delete(out, i)
				}
				return out, s.wrap("read", pks[chunk[0]], err)
			}
			keys = left
		}
	}
	return out, nil
}
