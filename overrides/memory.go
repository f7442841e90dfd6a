// Package overrides keeps the per-key limits an operator sets at run time
// (`edgelimit override`), for the policies with `overrides: true`: in
// memory for one process (Memory), or in the strategies' DynamoDB table
// for every instance (package overrides/dynamostore). The engine reads them
// through a cache bounded by each policy's override_staleness; these
// stores hold the truth.
package overrides

import (
	"context"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// Memory is an edgelimit.OverrideStore in this process's memory: what
// `edgelimit serve` uses with the memory stores, and tests. It is safe for
// concurrent use.
type Memory struct {
	now func() time.Time
	mu  sync.RWMutex
	m   map[memKey]entry
}

type memKey struct{ pol, key string }

type entry struct {
	l     policy.Limits
	until time.Time
}

// NewMemory returns an empty store whose expiries follow now (nil:
// time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, m: map[memKey]entry{}}
}

// Override returns the limits set for the hashed key under policy, unless
// they have expired.
func (s *Memory) Override(_ context.Context, pol, key string) (policy.Limits, bool, error) {
	s.mu.RLock()
	e, ok := s.m[memKey{pol, key}]
	s.mu.RUnlock()
	if !ok || !e.until.IsZero() && !s.now().Before(e.until) {
		return policy.Limits{}, false, nil
	}
	return e.l, true, nil
}

// SetOverride sets the limits of the hashed key under policy until the
// instant given (zero: until deleted).
func (s *Memory) SetOverride(_ context.Context, pol, key string, l policy.Limits, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, e := range s.m { // expired entries go as new ones come
		if !e.until.IsZero() && !now.Before(e.until) {
			delete(s.m, k)
		}
	}
	s.m[memKey{pol, key}] = entry{l, until}
	return nil
}

// DeleteOverride removes the override of the hashed key under policy.
func (s *Memory) DeleteOverride(_ context.Context, pol, key string) error {
	s.mu.Lock()
	delete(s.m, memKey{pol, key})
	s.mu.Unlock()
	return nil
}

var _ edgelimit.OverrideStore = (*Memory)(nil)
