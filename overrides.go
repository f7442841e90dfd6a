package edgelimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit/policy"
)

// OverrideStore holds the limits operators set for single client keys at
// run time (`edgelimit override`), for the policies with overrides: true.
// The engine caches what it reads (Policy.OverrideStaleness), so a store is
// read at most once per key per staleness interval per instance.
type OverrideStore interface {
	// Override returns the limits set for the hashed client key under the
	// policy, and false when there are none (or they have expired).
	Override(ctx context.Context, policy, key string) (policy.Limits, bool, error)
	// SetOverride sets the limits of the hashed key under policy, until
	// the given instant (zero: until removed).
	SetOverride(ctx context.Context, policy, key string, l policy.Limits, until time.Time) error
	// DeleteOverride removes it; removing none is not an error.
	DeleteOverride(ctx context.Context, policy, key string) error
}

// overrideCache remembers, per policy, the overrides read for each hashed
// key (and that there were none) for the policy's staleness. Concurrent
// requests of one key wait for one read.
type overrideCache struct {
	seed   maphash.Seed
	shards [16]overrideShard
}

type overrideShard struct {
	mu sync.Mutex
	m  map[string]*overrideEntry
}

type overrideEntry struct {
	l     policy.Limits
	until time.Time
	// known: l is what a read found (an override, or that there is none),
	// this read's or an earlier one's; err is why this entry's read
	// failed, or nil; skipped: it failed because the override store's
	// breaker was open.
	known   bool
	err     error
	skipped bool
	ready   chan struct{} // closed once the read has ended
}

// maxOverrideEntries bounds one shard; beyond it, expired entries go first,
// then arbitrary ones (a dropped entry costs one read again).
const maxOverrideEntries = 1 << 14

func newOverrideCache() *overrideCache {
	c := &overrideCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = map[string]*overrideEntry{}
	}
	return c
}

// forget drops what the cache knows of key, after this instance changed
// its override.
func (oc *overrideCache) forget(key string) {
	sh := &oc.shards[maphash.String(oc.seed, key)&15]
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

// overrideRead is what a request learns of its key's override: the
// limits in force (zero: none), whether a read ever found them (known),
// and, when the read that should have refreshed them failed, why.
type overrideRead struct {
	l       policy.Limits
	known   bool
	err     error
	skipped bool
}

// override returns the override in force for key, reading the store when the
// cached answer is older than staleness. A read that fails keeps what the
// last successful one found (the last override known to this instance),
// is not cached (the next request of the key reads again, through the
// override store's breaker) and is reported in err, for on_store_error
// to decide (overrideFailed).
func (e *Engine) override(ctx context.Context, c *compiled, key string, now time.Time) overrideRead {
	oc := c.overrides
	sh := &oc.shards[maphash.String(oc.seed, key)&15]
	sh.mu.Lock()
	ent := sh.m[key]
	if ent != nil && (now.Before(ent.until) || !isReady(ent.ready)) {
		// Fresh, or being read: wait for the read under way.
		ready := ent.ready
		sh.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return overrideRead{err: ctx.Err()}
		}
		return overrideRead{l: ent.l, known: ent.known, err: ent.err, skipped: ent.skipped}
	}
	if len(sh.m) >= maxOverrideEntries {
		for k, old := range sh.m {
			if (!now.Before(old.until) && isReady(old.ready)) || len(sh.m) >= maxOverrideEntries {
				delete(sh.m, k)
			}
			if len(sh.m) < maxOverrideEntries/2 {
				break
			}
		}
	}
	prev := ent
	ent = &overrideEntry{until: now.Add(c.OverrideStaleness), ready: make(chan struct{})}
	if prev != nil {
		ent.l, ent.known = prev.l, prev.known
	}
	sh.m[strings.Clone(key)] = ent // not the request's memory (Request.Key)
	sh.mu.Unlock()
	// The override store has a breaker of its own: while it is open the
	// lookup gets no budget, and fails at once unless the store needs no
	// call for it.
	tk := e.overrideBreaker.admit(ctx, now)
	cctx := e.budget(ctx, time.Now(), tk.budget(c.StoreTimeout))
	l, ok, err := e.overrides.Override(cctx, c.Name, key)
	cctx.stop()
	e.overrideBreaker.done(ctx, tk, resultOf(cctx, ctx, err), err)
	if err != nil {
		// The last known override stays; the failure is not cached.
		ent.err, ent.skipped, ent.until = err, tk == refused, now
	} else {
		if !ok {
			l = policy.Limits{}
		}
		ent.l, ent.known = l, true
	}
	close(ent.ready)
	return overrideRead{l: ent.l, known: ent.known, err: ent.err, skipped: ent.skipped}
}

func isReady(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// errOverrideRead marks a policy's store failure that was its override
// read's.
var errOverrideRead = errors.New("edgelimit: override read failed")

// applyOverride sets req's limits to the override in force for its key.
// When the read that should have refreshed it failed, the failure is the
// policy's store failure, decided by on_store_error instead of the limiter
// (s.ovrFail; see overrideFailed): deny fails closed, local decides in
// this instance's twin under the last override this instance knows (the
// policy's or tier's limits when it never read one), allow admits. Only
// allow with an override known to this instance asks the limiter, under
// that override: its store works, and the limit in force is known. Never
// does a failed read silently put the policy's own limits in force.
func (e *Engine) applyOverride(ctx context.Context, rs *routeSet, c *compiled, req *Request, s *slot) {
	r := e.override(ctx, c, req.Key, req.At)
	if !r.l.IsZero() {
		req.Limits = r.l.Or(req.Limits)
	}
	if r.err == nil {
		return
	}
	s.ovrErr = fmt.Errorf("%w: %w", errOverrideRead, r.err)
	s.ovrSkipped = r.skipped
	s.ovrFail = !(c.OnStoreError == policy.FailOpen && r.known)
	if r.skipped {
		return // the store was not asked: the breaker logged opening
	}
	last := "none known"
	switch {
	case r.known && r.l.IsZero():
		last = "none"
	case r.known:
		last = describeOverride(r.l)
	}
	decides := c.OnStoreError.String()
	if !s.ovrFail {
		decides = "the limiter, under the last known override"
	}
	e.log.LogAttrs(ctx, slog.LevelWarn, "edgelimit: override read failed",
		slog.String("policy", c.Name), slog.String("route", rs.label), slog.String("key_hash", req.Key),
		slog.String("on_store_error", c.OnStoreError.String()), slog.String("decided_by", decides),
		slog.String("last_known_override", last), slog.String("error", r.err.Error()))
}

// describeOverride says an override's limits for a log line.
func describeOverride(l policy.Limits) string {
	if l.Block {
		return "block"
	}
	var b []byte
	if l.Limit > 0 {
		b = append(b, "limit="...)
		b = strconv.AppendInt(b, l.Limit, 10)
	}
	if l.Window > 0 {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, "window="...)
		b = append(b, l.Window.String()...)
	}
	if l.Burst > 0 {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, "burst="...)
		b = strconv.AppendInt(b, l.Burst, 10)
	}
	return string(b)
}

// overrideFailed decides a policy whose override read failed (s.ovrFail)
// as a failure of its store, and reports true; nothing when another policy
// blocked the request already (the policy is left out, as one that cannot
// peek is: what it would answer is not known).
func (e *Engine) overrideFailed(ctx context.Context, rs *routeSet, c *compiled, s *slot, blocked bool) bool {
	if !s.ovrFail {
		return false
	}
	if !blocked {
		e.storeFailed(ctx, rs, c, s, s.ovrErr, s.ovrSkipped)
		if c.deferred && s.o == allowed {
			s.o = known // it spends after the response
		}
	}
	return true
}

// overrideGroup decides a batch group one member at a time when the
// override read of one of its members failed (handled): that member by
// on_store_error, the others as plain limiters, and what they spent is
// refunded when one of them blocks the request.
func (e *Engine) overrideGroup(ctx context.Context, start time.Time, rs *routeSet, g []member, slots []slot, blocked bool) (handled, isBlocked bool) {
	for _, c := range g {
		handled = handled || slots[c.slot].ovrFail
	}
	if !handled {
		return false, blocked
	}
	was := blocked
	for _, c := range g {
		s := &slots[c.slot]
		switch {
		case e.overrideFailed(ctx, rs, c.compiled, s, blocked):
		case blocked:
			e.peekOne(ctx, start, rs, c.compiled, s)
		default:
			e.allowOne(ctx, start, rs, c.compiled, s)
		}
		if s.o == denied || s.o == failedClosed {
			blocked = true
		}
	}
	if blocked && !was {
		e.refund(ctx, start, rs, g, slots)
	}
	return true, blocked
}
