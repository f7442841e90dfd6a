package durablecounter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter/internal/wire"
)

// remoteStore is the Store on a table that every instance shares: the
// one-write protocol of the package documentation, over a wire.Conn
// (durablecounter/dynamostore's on the AWS SDK, which embeds it). It holds
// no SDK type: the algorithms describe their conditional updates and read
// items back through wire's accessor, and the Conn converts.
//
// Its batches are in batch.go. Of the servers' quirks, the Conn absorbs
// dynalite's ignored ReturnValuesOnConditionCheckFailure (it reads the
// item; see wire.ConditionFailed), and applyAll handles dynalite's missing
// TransactWriteItems.
type remoteStore struct {
	conn   wire.Conn
	margin time.Duration
	mode   wire.TxMode
	// noTx: the server answered that it lacks TransactWriteItems.
	noTx atomic.Bool
	key  string
	// views is this instance's last view of each item, or nil.
	views *stateCache
}

func init() {
	wire.NewStore = func(cfg wire.Config) any { return newRemote(cfg) }
}

func newRemote(cfg wire.Config) *remoteStore {
	s := &remoteStore{conn: cfg.Conn, margin: cfg.ExpiryMargin, mode: cfg.Transactions}
	if cfg.ViewCacheSize > 0 {
		s.views = newStateCache(cfg.ViewCacheSize)
	}
	s.key = fmt.Sprintf("durablecounter/dynamodb/%s/%p", cfg.Name, s)
	return s
}

const (
	// maxAttempts bounds the conditional updates (or transactions) of one
	// decision: the first, and retries after a condition failed only
	// because this instance's view of the item was out of date, or a
	// transaction met another. The context (the engine's time budget)
	// bounds them first: a failure that a retry would resolve is retried
	// while the budget lasts, not reported as a store failure.
	maxAttempts = 32
	// maxRefundFailures bounds the retries of a refund whose call failed
	// (throttling, a dropped connection), within the context.
	maxRefundFailures = 8
	// maxReadRounds bounds BatchGetItem's rounds for unprocessed keys.
	maxReadRounds = 4
	// viewGrace keeps a view after its item stopped mattering: a sliding
	// log's count of expired units stays useful.
	viewGrace = 10 * time.Minute
)

func (s *remoteStore) batchKey() string { return s.key }

// view returns this instance's last view of o's item, or the zero state.
func (s *remoteStore) view(o *op) state {
	if s.views == nil || !o.alg.needsView() {
		return state{}
	}
	st, _ := s.views.get(o.id, o.t)
	return st
}

// remember keeps st as the view of o's item.
func (s *remoteStore) remember(o *op, st state) {
	if s.views == nil || !o.alg.needsView() {
		return
	}
	s.views.put(o.id, st, o.t, max(o.alg.expiry(st, o.t), o.t)+int64(s.margin)+int64(viewGrace))
}

func (s *remoteStore) forget(o *op) {
	if s.views != nil && o.alg.needsView() {
		s.views.del(o.id)
	}
}

// update returns o's conditional update given view.
func (s *remoteStore) update(o *op, view state, tx bool) condUpdate {
	u := condUpdate{tx: tx}
	o.alg.update(view, o.t, o.cost, s.margin, &u)
	// A failure that proves the denial by itself needs no old item.
	_, u.SkipOldRead = o.alg.blind(o.t, o.cost)
	return u
}

func (s *remoteStore) apply(ctx context.Context, op1 op) (result, error) {
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
			st, err := o.alg.decode(item, o.t)
			if err != nil {
				return result{}, fmt.Errorf("durablecounter: update %q: reply: %w", pk, err)
			}
			if !st.exists {
				return result{}, fmt.Errorf("durablecounter: update %q: reply has no state", pk)
			}
			s.remember(o, st)
			return result{ok: true, known: true, st: st, d: o.alg.decision(st, o.t, o.cost, true), rc: o.alg.receipt(st, u.at, o.cost)}, nil
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
			return result{d: o.alg.unknown(o.t, o.cost, false)}, nil
		case o.alg.exact() || !o.alg.fits(st, o.t, o.cost):
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
// (algorithm.blind). known is false only for an exact algorithm whose old
// item is unknown: the denial stands without its state.
func (s *remoteStore) failed(o *op, pk string, old wire.Item, readErr error) (st state, known bool, err error) {
	if old != nil {
		st, err := o.alg.decode(old, o.t)
		if err != nil {
			return state{}, false, fmt.Errorf("durablecounter: update %q: old item: %w", pk, err)
		}
		s.remember(o, st)
		return st, true, nil
	}
	if lb, ok := o.alg.blind(o.t, o.cost); ok {
		return lb, true, nil
	}
	if o.alg.exact() {
		return state{}, false, nil
	}
	if readErr == nil {
		return state{}, false, fmt.Errorf("durablecounter: update %q: condition failed without the old item", pk)
	}
	return state{}, false, s.wrap("read", pk, readErr)
}

func (s *remoteStore) denied(o *op, st state) result {
	return result{known: true, st: o.alg.compact(st, o.t), d: o.alg.decision(st, o.t, o.cost, false)}
}

// getItem returns the state of o's item with a strongly consistent read.
func (s *remoteStore) getItem(ctx context.Context, o *op, pk string) (state, error) {
	item, err := s.conn.Get(ctx, pk)
	if err != nil {
		return state{}, s.wrap("read", pk, err)
	}
	st, err := o.alg.decode(item, o.t)
	if err != nil {
		return state{}, fmt.Errorf("durablecounter: read %q: %w", pk, err)
	}
	s.remember(o, st)
	return st, nil
}

func (s *remoteStore) refund(ctx context.Context, op1 op, rc edgelimit.Receipt) (bool, error) {
	o := &op1
	pk := o.id.pk()
	var seen *state
	failures := 0
	for attempt := 1; ; attempt++ {
		var u condUpdate
		if !o.alg.refundUpdate(rc, seen, attempt, o.t, o.cost, &u) {
			return false, nil // nothing (left) to give back
		}
		// Only an algorithm whose guard can fail for a concurrent refund
		// looks at the item again.
		u.SkipOldRead = !o.alg.refundRetries()
		_, err := s.conn.Update(ctx, pk, &u.Update)
		if err == nil {
			s.forget(o) // the view is out of date now
			return true, nil
		}
		var cf *wire.ConditionFailed
		if errors.As(err, &cf) {
			if !o.alg.refundRetries() {
				return false, nil // the guard failed: nothing left to give back
			}
			// A concurrent refund changed what is left: look again.
			var st state
			switch {
			case cf.Old != nil:
				if st, err = o.alg.decode(cf.Old, o.t); err != nil {
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

func (s *remoteStore) get(ctx context.Context, o op) (state, error) {
	return s.getItem(ctx, &o, o.id.pk())
}

func (s *remoteStore) read(ctx context.Context, ops []op, out []state) error {
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
func (s *remoteStore) readAll(ctx context.Context, ops []op, pks []string, which []int) (map[int]state, error) {
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
		st, err := ops[i].alg.decode(item, ops[i].t)
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

// wrap names the operation and item of a failed call, and marks
// throttling with ErrThrottled.
func (s *remoteStore) wrap(what, pk string, err error) error {
	if s.conn.Throttled(err) {
		return fmt.Errorf("durablecounter: %s %q: %w: %w", what, pk, ErrThrottled, err)
	}
	return fmt.Errorf("durablecounter: %s %q: %w", what, pk, err)
}
