package durablecounter

import "github.com/edgelimit/edgelimit"

// The in-process twin (Local) decides a policy while its store fails
// (on_store_error: local). It starts each key from what this instance last
// knew of it, not from a full quota: the engine tells it every decision
// the store made (Follow), and it shares the Counter's deny cache, so that
// the denials this instance knows hold while the store fails, and its own
// denials spare a slow store the calls that would time out.

var _ edgelimit.Follower = (*Counter)(nil)

// Follow raises the key's state in a Counter on a Memory store (the twin
// Local returns) to what d, a decision of the Counter it stands in for,
// had left at req's instant: the policy's quota less d.Remaining, as if
// spent at that instant. That is never less spent than the store was (a
// window's count, a bucket's level; a sliding window's or log's units
// counted as of now, which leave later than they would). Where the twin's
// own state has less left (it admitted requests the store never heard
// of), it is kept: the twin never forgets what it admitted, so that
// however often the instance falls back, the twin admits no more than the
// policy allows on its own. A sharded policy's units are spread over its
// shards. On a Counter on another store Follow does nothing.
func (c *Counter) Follow(req edgelimit.Request, d edgelimit.Decision) {
	// Through an interface, not *Memory, so that a program without
	// MemoryCode links none of the Memory store's methods.
	m, ok := c.store.(raiser)
	if !ok || req.Key == "" {
		return
	}
	v, err := c.variantFor(req)
	if err != nil || v.lim.Limit == 0 {
		return
	}
	t := c.instant(req)
	spent := min(max(v.qLimit-d.Remaining, 0), v.qLimit)
	for i := range c.shards {
		units := spent
		if c.shards > 1 {
			units = share(spent, c.shards, i)
		}
		if units == 0 {
			continue // the twin's state has at least as much left
		}
		o := c.op(v, i, req.Key, units, t)
		m.raise(&o, o.rule.commit(state{}, t, units))
	}
}

// raiser is the Memory store's raise.
type raiser interface{ raise(o *op, st state) }

// raise replaces o's item with st when st has less left at o.t than the
// item has.
func (s *Memory) raise(o *op, st state) {
	left := func(st state) int64 { return o.rule.decision(st, o.t, 1, o.rule.fits(st, o.t, 1)).Remaining }
	r := s.ref(&o.id)
	r.sh.mu.Lock()
	defer r.sh.mu.Unlock()
	if cur := r.live(o.t); left(st) >= left(cur) {
		return
	}
	if r.find() == nil && r.sh.makeRoom(o.t) != nil {
		return // full of live items: the twin decides the key from what it has
	}
	r.put(memEntry{st: st, expires: o.rule.expiry(st, o.t) + int64(s.margin)}, nil)
}
