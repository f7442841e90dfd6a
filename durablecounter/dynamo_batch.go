package durablecounter

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// This file is the DynamoDB store's batches: one transaction (TransactWriteItems)
// of the members' conditional updates, or, on a server without
// transactions, the sequential fallback.

func (s *dynamoStore) applyAll(ctx context.Context, ops []op, res []result) (bool, error) {
	if len(ops) == 1 { // one conditional update is atomic already
		r, err := s.apply(ctx, ops[0])
		res[0] = r
		return r.ok, err
	}
	if s.mode == wire.TxOff || s.mode == wire.TxAuto && s.noTx.Load() {
		return s.applySequential(ctx, ops, res)
	}
	committed, err := s.applyTransaction(ctx, ops, res)
	if err != nil && s.conn.Unsupported(err) {
		// The server lacks TransactWriteItems (dynalite): the one place
		// that knows. TransactionsAuto switches to the sequential fallback
		// for good, starting with this batch.
		if s.mode == wire.TxRequired {
			return false, fmt.Errorf("%w: %w", ErrNoTransactions, err)
		}
		s.noTx.Store(true)
		return s.applySequential(ctx, ops, res)
	}
	return committed, err
}

// memberVerdict is how a transaction's cancellation judged one member.
type memberVerdict uint8

const (
	held     memberVerdict = iota // its condition held
	violated                      // it does not fit: the batch is denied
	stale                         // its condition failed, but it fits the state returned
	conflict                      // not evaluated (another transaction): read it if needed
	unknown                       // its condition failed and its state could not be had
)

// applyTransaction commits ops with one TransactWriteItems, each member's
// update from this instance's view of its item. A cancellation is judged
// member by member (judgeCancel); the batch is denied when a member does
// not fit, else it is sent again, with the views the cancellation
// corrected, while the context lasts and at most maxAttempts times.
func (s *dynamoStore) applyTransaction(ctx context.Context, ops []op, res []result) (bool, error) {
	n := len(ops)
	pks := make([]string, n)
	views := make([]state, n)
	for i := range ops {
		pks[i] = ops[i].id.pk()
		views[i] = s.view(&ops[i])
	}
	us := make([]wire.Update, n)
	rcs := make([]edgelimit.Receipt, n)
	verdicts := make([]memberVerdict, n)
	states := make(map[int]state, n)
	for attempt := 1; ; attempt++ {
		for i := range ops {
			u := s.update(&ops[i], views[i], true)
			if u.readOnly {
				// A member can never fit: the batch is denied. Read every
				// member to report each.
				for j := range verdicts {
					verdicts[j] = conflict // judged by the read
				}
				read, _ := s.readAll(ctx, ops, pks, indexes(n))
				s.judge(ops, verdicts, read, res)
				return false, nil
			}
			us[i], rcs[i] = u.Update, u.rc
		}
		err := s.conn.Transact(ctx, pks, us)
		if err == nil {
			s.committed(ctx, ops, pks, rcs, res)
			return true, nil
		}
		var tc *wire.Canceled
		if !errors.As(err, &tc) {
			return false, s.wrap("transact", pks[0], err)
		}
		denied, err := s.judgeCancel(ops, pks, tc, verdicts, states)
		if err != nil {
			return false, err
		}
		if denied {
			// Read the members the cancellation did not show, for their
			// headers, and report every one.
			var need []int
			for i, v := range verdicts {
				if v == held || v == conflict {
					need = append(need, i)
				}
			}
			read, _ := s.readAll(ctx, ops, pks, need)
			for i, st := range read {
				states[i] = st
			}
			s.judge(ops, verdicts, states, res)
			return false, nil
		}
		// Every member fits: only out-of-date views and other transactions
		// stood in the way. The one retry decision.
		if attempt == maxAttempts || ctx.Err() != nil {
			return false, fmt.Errorf("durablecounter: transact %q: %w (%d transactions): %w", pks[0], ErrContention, attempt, tc)
		}
		for i, v := range verdicts {
			if v == stale {
				views[i] = states[i]
			}
		}
	}
}

// judgeCancel fills each member's verdict (and, where the cancellation
// showed it, its state) from a cancelled transaction, and reports whether
// the batch is denied: a member does not fit the state its failed
// condition returned. A failure without the state (its read failed) denies
// the batch if the member's condition is exact, and is an error otherwise,
// unless another member denies it anyway.
func (s *dynamoStore) judgeCancel(ops []op, pks []string, tc *wire.Canceled, verdicts []memberVerdict, states map[int]state) (bool, error) {
	if len(tc.Reasons) != len(ops) {
		return false, fmt.Errorf("durablecounter: transact %q: %d cancellation reasons for %d items: %w", pks[0], len(tc.Reasons), len(ops), tc)
	}
	clear(states)
	denied := false
	var failErr error
	for i, r := range tc.Reasons {
		o := &ops[i]
		switch r.Code {
		case wire.CodeNone:
			verdicts[i] = held
		case wire.CodeConflict:
			verdicts[i] = conflict
		case wire.CodeConditionFailed:
			st, known, err := s.failed(o, pks[i], r.Old, r.ReadErr)
			switch {
			case err != nil:
				verdicts[i] = unknown
				failErr = cmp.Or(failErr, err)
			case !known:
				verdicts[i], denied = violated, true
			case o.enc.conditions().exact || !o.rule.fits(st, o.t, o.cost):
				verdicts[i], denied, states[i] = violated, true, st
			default:
				verdicts[i], states[i] = stale, st
			}
		case wire.CodeThrottled:
			return false, fmt.Errorf("durablecounter: transact %q: %w: %w", pks[i], ErrThrottled, tc)
		default:
			return false, fmt.Errorf("durablecounter: transact %q: %s: %w", pks[i], r.Name, tc)
		}
	}
	if !denied && failErr != nil {
		return false, fmt.Errorf("%w: %w", failErr, tc)
	}
	return denied, nil
}

// committed fills the results of a committed transaction. A transaction
// returns no values: read the states (one BatchGetItem). Should that fail,
// the decisions stand with their quotas unknown.
func (s *dynamoStore) committed(ctx context.Context, ops []op, pks []string, rcs []edgelimit.Receipt, res []result) {
	read, _ := s.readAll(ctx, ops, pks, indexes(len(ops)))
	for i := range ops {
		o := &ops[i]
		if st, ok := read[i]; ok && st.exists {
			res[i] = result{ok: true, known: true, st: st, d: o.rule.decision(st, o.t, o.cost, true)}
		} else {
			res[i] = result{ok: true, d: o.enc.unknown(o.t, o.cost, true)}
		}
		res[i].rc = rcs[i]
	}
}

// indexes returns 0, 1, ..., n-1.
func indexes(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

// judge fills the results of a batch that was not committed from each
// member's verdict and state: a member that does not fit is denied, the
// others report their state without the batch. A member whose state is
// not known reports no violation and an unknown quota, unless its verdict
// already is one.
func (s *dynamoStore) judge(ops []op, verdicts []memberVerdict, states map[int]state, res []result) {
	for i := range ops {
		o := &ops[i]
		st, ok := states[i]
		switch {
		case verdicts[i] == violated && ok:
			res[i] = s.denied(o, st)
		case verdicts[i] == violated:
			res[i] = result{d: o.enc.unknown(o.t, o.cost, false)}
		case !ok:
			res[i] = result{ok: true, d: o.enc.unknown(o.t, o.cost, true)}
		case verdicts[i] == held && !o.enc.conditions().exact:
			// Its condition held, so it fit when the transaction ran; the
			// read may show a later state.
			res[i] = result{ok: true, known: true, st: o.rule.compact(st, o.t), d: o.rule.decision(st, o.t, o.cost, true)}
		case verdicts[i] == held:
			res[i] = result{ok: true, known: true, st: st, d: o.rule.decision(st, o.t, o.cost, true)}
		case verdicts[i] == conflict && !o.rule.fits(st, o.t, o.cost):
			res[i] = s.denied(o, st)
		default:
			res[i] = result{ok: true, known: true, st: o.rule.compact(st, o.t), d: o.rule.decision(st, o.t, o.cost, true)}
		}
	}
}

// applySequential is the batch fallback for servers without transactions
// (see dynamostore.TransactionsOff).
func (s *dynamoStore) applySequential(ctx context.Context, ops []op, res []result) (bool, error) {
	for i := range ops {
		r, err := s.apply(ctx, ops[i])
		if err != nil {
			return false, errors.Join(err, s.compensate(ctx, ops[:i], res[:i]))
		}
		res[i] = r
		if r.ok {
			continue
		}
		if err := s.compensate(ctx, ops[:i], res[:i]); err != nil {
			return false, err
		}
		// Read the members not tried yet, to name every violated policy.
		rest := make([]int, 0, len(ops)-i-1)
		verdicts := make([]memberVerdict, len(ops))
		pks := make([]string, len(ops))
		for j := i + 1; j < len(ops); j++ {
			pks[j] = ops[j].id.pk()
			verdicts[j] = conflict // judged by the read
			rest = append(rest, j)
		}
		read, _ := s.readAll(ctx, ops, pks, rest)
		tail := make([]result, len(ops))
		s.judge(ops, verdicts, read, tail)
		copy(res[i+1:], tail[i+1:])
		return false, nil
	}
	return true, nil
}

// compensate gives back what the members of a failed sequential batch
// spent, each by its receipt, and reports their state without the batch. A
// refund that does not land (Store.refund retries until its context ends)
// is an error: its units would stay spent until they leave the window, and
// the caller must know.
func (s *dynamoStore) compensate(ctx context.Context, ops []op, res []result) error {
	var errs []error
	for j := range ops {
		o := &ops[j]
		rc := res[j].rc
		res[j].rc = edgelimit.Receipt{}
		if _, err := s.refund(ctx, *o, rc); err != nil {
			errs = append(errs, fmt.Errorf("durablecounter: compensating a batch member: %w", err))
		}
		if !res[j].known {
			continue
		}
		st, _ := o.rule.giveBack(o.rule.compact(res[j].st, o.t), rc, o.t, o.cost)
		res[j].st = st
		res[j].d = o.rule.decision(st, o.t, o.cost, true)
	}
	return errors.Join(errs...)
}
