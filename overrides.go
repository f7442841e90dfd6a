package edgelimit

import (
	"context"
	"hash/maphash"
	"log/slog"
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
	ready chan struct{} // closed once l is read
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

// override returns the override in force for key, reading the store when the
// cached answer is older than staleness. A store that fails is logged and
// counts as no override, for one staleness interval (the policy's own
// limits apply: a broken store never blocks a request); so does one whose
// breaker is open, without the log line.
func (e *Engine) override(ctx context.Context, c *compiled, key string, now time.Time) policy.Limits {
	oc := c.overrides
	sh := &oc.shards[maphash.String(oc.seed, key)&15]
	sh.mu.Lock()
	ent := sh.m[key]
	if ent != nil && now.Before(ent.until) {
		ready := ent.ready
		sh.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return policy.Limits{}
		}
		return ent.l
	}
	if len(sh.m) >= maxOverrideEntries {
		for k, old := range sh.m {
			if !now.Before(old.until) || len(sh.m) >= maxOverrideEntries {
				delete(sh.m, k)
			}
			if len(sh.m) < maxOverrideEntries/2 {
				break
			}
		}
	}
	ent = &overrideEntry{until: now.Add(c.OverrideStaleness), ready: make(chan struct{})}
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
	if err != nil && tk != refused {
		e.log.LogAttrs(ctx, slog.LevelWarn, "edgelimit: override lookup failed; the policy's own limits apply",
			slog.String("policy", c.Name), slog.String("error", err.Error()))
	}
	if !ok || err != nil {
		l = policy.Limits{}
	}
	ent.l = l
	close(ent.ready)
	return l
}
