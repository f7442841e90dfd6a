// Package bans keeps the escalating bans of the policies with a ban field
// (policy.Ban): in memory for one process (Memory), or in the strategies'
// DynamoDB table for every instance (package bans/dynamostore). The engine
// checks a key's ban before its limiters, through a cache bounded by the
// policy's ban.staleness, and counts each denial here; these stores hold
// the truth. The rule itself (when a denial bans, for how long, when a run
// of bans starts over) is the same for both.
package bans

import (
	"context"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/banrule"
)

// Memory is an edgelimit.BanStore in this process's memory: what
// `edgelimit serve` uses with the memory stores, and tests. It is safe for
// concurrent use; each key's denials are counted under one lock, so of
// any number of concurrent denials exactly the After-th starts a ban.
type Memory struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[banrule.Key]entry
	// writes counts CountDenial calls since the last sweep of expired
	// entries.
	writes int
}

type entry struct {
	st     banrule.State
	expiry time.Time
}

// NewMemory returns an empty store whose expiries follow now (nil:
// time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, m: map[banrule.Key]entry{}}
}

// ReadBan returns the key's state, the zero State once it has expired.
func (s *Memory) ReadBan(_ context.Context, k banrule.Key) (banrule.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[k]
	if !ok || !s.now().Before(e.expiry) {
		return banrule.State{}, nil
	}
	return e.st, nil
}

// CountDenial counts one denial of the key at t.
func (s *Memory) CountDenial(_ context.Context, k banrule.Key, r banrule.Rule, t time.Time) (banrule.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.writes++; s.writes >= 1024 { // expired entries go as new ones come
		s.writes = 0
		for key, e := range s.m {
			if !now.Before(e.expiry) {
				delete(s.m, key)
			}
		}
	}
	e, ok := s.m[k]
	if !ok || !now.Before(e.expiry) {
		e = entry{}
	}
	out := r.Deny(e.st, t)
	s.m[k] = entry{st: out.State, expiry: r.Expiry(t)}
	return out, nil
}

// LiftBan forgets the key's state.
func (s *Memory) LiftBan(_ context.Context, k banrule.Key) error {
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
	return nil
}

var _ edgelimit.BanStore = (*Memory)(nil)
