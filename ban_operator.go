package edgelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edgelimit/edgelimit/internal/banrule"
)

// BanInfo is what the ban store holds of one client key under a policy
// with a ban, as Engine.Ban reads it.
type BanInfo struct {
	Policy string
	// Banned: a ban is in force at At; it ends at Until.
	Banned bool
	Until  time.Time
	// Level is how many bans the key's current run has had (the next ban
	// lasts for × growth^Level, at most max, unless the run has decayed
	// by then); 0 when it has had none.
	Level int
	// Denials counted since Since toward the next ban (0: none, or their
	// period has ended).
	Denials int64
	Since   time.Time
	// At is the instant the state was read at.
	At time.Time
}

// Ban reads the raw key's ban under the named policy from the ban store
// (not from this instance's cache).
func (e *Engine) Ban(ctx context.Context, name, raw string) (BanInfo, error) {
	c, k, err := e.banKey(name, raw)
	if err != nil {
		return BanInfo{}, err
	}
	st, err := e.bans.ReadBan(ctx, k)
	if err != nil {
		return BanInfo{}, err
	}
	now := e.now()
	info := BanInfo{Policy: c.Name, At: now, Level: c.bans.rule.LevelAt(st, now)}
	if st.Banned(now) {
		info.Banned, info.Until, info.Level = true, st.Until, st.Level
	} else if !st.Until.IsZero() && info.Level > 0 {
		info.Until = st.Until // the last ban of the run
	}
	if c.bans.rule.Counting(st, now) {
		info.Denials, info.Since = st.Denials, st.Since
	}
	return info, nil
}

// Unban lifts the raw key's ban under the named policy and forgets its
// denials and level, so that its next ban, if any, is a first one. This
// instance applies it at once; every other instance within the policy's
// ban.staleness (the longest it trusts what it read).
func (e *Engine) Unban(ctx context.Context, name, raw string) error {
	c, k, err := e.banKey(name, raw)
	if err != nil {
		return err
	}
	if err := e.bans.LiftBan(ctx, k); err != nil {
		return err
	}
	c.bans.forget(k.Key)
	return nil
}

func (e *Engine) banKey(name, raw string) (*compiled, banrule.Key, error) {
	c, err := e.lookup(name)
	if err != nil {
		return nil, banrule.Key{}, err
	}
	if c.bans == nil {
		return nil, banrule.Key{}, fmt.Errorf("%w: policy %q has no ban", errors.ErrUnsupported, c.Name)
	}
	key, err := e.keyOf(c, raw)
	if err != nil {
		return nil, banrule.Key{}, err
	}
	return c, banrule.Key{Policy: c.Name, Key: key}, nil
}
