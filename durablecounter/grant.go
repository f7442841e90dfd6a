package durablecounter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit"
)

// Grants (Counter.Grant) are units an operator gives one key beyond its
// quota. They are kept apart from the quota, in one item per policy and
// key, whatever the algorithm, its window or its shards:
//
//	grant#<policy>#<keyhash>   u (units left), un (the grant's end, Unix ms), expires_at
//	grant#<policy>#            un: the latest end of any grant of the policy (the marker)
//
// Grants are for the policies an operator manages at run time, those with
// overrides: true (Policy.Overrides): a policy without takes none, and its
// decisions cost nothing for them. A request the quota denies is admitted
// from the key's grant if the grant
// has its cost left, with one more conditional update (ADD u -cost if
// u >= cost and un > now): the quota is spent first, then the grant, and
// never more than either holds, however many instances take from them at
// once. The marker keeps keys without grants at one call for a denial: an
// instance reads it at most once per DenyCacheMaxAge (1 s), only on the way
// to a denial, and asks a key's grant only while the marker says that some
// grant of the policy may be in force.

// poolOp is the op that takes cost units from key's grant at t.
func (c *Counter) poolOp(key string, cost, t int64) op {
	return newOp(c.pool, c.pool.itemFor(key, noShard, t), cost, t)
}

// markerOp is the op that reads the policy's grant marker.
func (c *Counter) markerOp(t int64) op {
	return newOp(c.pool, c.pool.itemFor("", noShard, t), 1, t)
}

// grantMarker is what this instance knows of the policy's marker: the
// latest end of any grant, as of when it last read it.
type grantMarker struct {
	mu     sync.Mutex
	read   bool
	readAt int64 // decision-clock instant of the read
	end    int64 // Unix nanoseconds; 0: no grant
	flight chan struct{}
}

// grantsMayExist reports whether some grant of the policy may be in force
// at t: from what this instance read of the marker less than
// DenyCacheMaxAge ago, else from a read of it (one per interval, however
// many requests wait for it).
func (c *Counter) grantsMayExist(ctx context.Context, t int64) (bool, error) {
	if c.pool == nil {
		return false, nil // a policy without overrides takes no grants
	}
	m := &c.marker
	for {
		m.mu.Lock()
		if m.read && t >= m.readAt && t-m.readAt < c.denyAge {
			may := t < m.end
			m.mu.Unlock()
			return may, nil
		}
		if ch := m.flight; ch != nil {
			m.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return false, fmt.Errorf("durablecounter: the grant marker of %q: %w: %w", c.name, edgelimit.ErrWaited, ctx.Err())
			}
		}
		ch := make(chan struct{})
		m.flight = ch
		m.mu.Unlock()
		st, err := c.store.get(ctx, c.markerOp(t))
		m.mu.Lock()
		m.flight = nil
		if err == nil {
			m.read, m.readAt, m.end = true, t, 0
			if st.exists {
				m.end = st.at
			}
		}
		m.mu.Unlock()
		close(ch)
		if err != nil {
			return false, err
		}
	}
}

// grantsKnownAbsent reports, without a store call, that no grant of the
// policy can be in force at t (for answering a batch from the caches).
func (c *Counter) grantsKnownAbsent(t int64) bool {
	if c.pool == nil {
		return true
	}
	m := &c.marker
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.read && t >= m.readAt && t-m.readAt < c.denyAge && t >= m.end
}

// raised records a grant this instance made, until end.
func (m *grantMarker) raised(end int64) {
	m.mu.Lock()
	m.end = max(m.end, end)
	m.mu.Unlock()
}

// fromGrant is a request the quota denied (d), asked again of the key's
// grant: it is admitted if the grant has its cost left, and the grant
// pays all of it. The decision then says what the grant has left (with
// what the quota has), and Reason "grant".
func (c *Counter) fromGrant(ctx context.Context, req edgelimit.Request, cost, t int64, d edgelimit.Decision, peek bool) (edgelimit.Decision, error) {
	// Should the marker or the grant be out of reach, the quota's denial
	// stands: a grant is never a reason to fail a request.
	if may, err := c.grantsMayExist(ctx, t); err != nil || !may {
		return d, nil
	}
	o := c.poolOp(req.Key, cost, t)
	if c.deny != nil {
		if st, ok := c.deny.get(o.id, t); ok && !o.rule.fits(st, t, cost) {
			return d, nil
		}
	}
	var r result
	gen := c.denyGen(&o)
	if peek {
		st, err := c.store.get(ctx, o)
		if err != nil {
			return d, nil
		}
		fits := o.rule.fits(st, t, cost)
		r = result{ok: fits, known: true, st: o.rule.compact(st, t), d: o.rule.decision(st, t, cost, fits)}
	} else {
		var err error
		if r, err = c.store.apply(ctx, o); err != nil {
			return d, nil
		}
	}
	switch {
	case !r.ok || r.d.Remaining == 0:
		c.remember(&o, &r, 0, gen)
	case c.deny != nil:
		c.deny.del(o.id)
	}
	if !r.ok {
		return d, nil
	}
	// What the quota has left (less than the cost) and the grant: told()
	// keeps it within the quota the client is told.
	d = granted(d, r.d)
	if !peek {
		d.Receipt = r.rc
	}
	return d, nil
}

// Grant gives req's key units beyond its quota, until the instant until,
// or when until is zero until the end of the current window of the limits
// in force (req.Limits: a fixed or sliding window's end; one window from
// now for a sliding log and gcra). The units are spent once the quota is
// (see the package documentation, Grants); a grant made while another is
// in force adds its units to it, and they last until the later end. Reset
// does not take them back. The instance that grants honours it at once;
// others within DenyCacheMaxAge (they read the policy's grant marker
// again, and their deny-cache entries expire).
func (c *Counter) Grant(ctx context.Context, req edgelimit.Request, units int64, until time.Time) error {
	if req.Key == "" {
		return ErrNoKey
	}
	if c.pool == nil {
		return fmt.Errorf("%w: policy %q takes no grants; a policy an operator manages at run time has `overrides: true` (Policy.Overrides)", ErrGrant, c.name)
	}
	if units <= 0 || units > maxCount {
		return fmt.Errorf("%w: %d units", ErrGrant, units)
	}
	v, err := c.variantFor(req)
	if err != nil {
		return err
	}
	t := c.instant(req)
	end := v.algs[0].windowEnd(t)
	if !until.IsZero() {
		end = until.UnixNano()
	}
	// Stored to the millisecond, rounded up, on every store alike.
	end = (end + int64(time.Millisecond) - 1) / int64(time.Millisecond) * int64(time.Millisecond)
	if end <= t {
		return fmt.Errorf("%w: it would end at %s, which has passed", ErrGrant, time.Unix(0, end).UTC().Format(time.RFC3339Nano))
	}
	// The marker first: should the grant then fail, the marker only costs
	// other instances a look at a key's empty grant.
	if err := c.store.grant(ctx, c.markerOp(t), 0, end); err != nil {
		return err
	}
	o := c.poolOp(req.Key, units, t)
	if err := c.store.grant(ctx, o, units, end); err != nil {
		return err
	}
	c.marker.raised(end)
	c.invalidate(o.id)
	return nil
}
