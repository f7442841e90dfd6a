// Package banrule is the arithmetic of a policy's escalating ban (the
// policy's ban field), apart from where its state is kept: when a denial
// bans a key, how long that ban lasts, and when the escalation starts over.
// The engine's ban stores (package bans, bans/dynamostore) keep a State
// per policy and hashed key and change it by these rules; their methods
// take this package's types, so that only this module implements one.
package banrule

import (
	"math"
	"time"
)

// Rule is a policy's ban: After denials within Within ban the key for
// For × Growth^level, at most Max, where level is the number of bans of
// the key's current run; a run ends (the level starts over at 0) once
// Decay has passed since its last ban ended.
type Rule struct {
	After  int64
	Within time.Duration
	For    time.Duration
	Growth float64
	Max    time.Duration
	Decay  time.Duration
}

// State is what a store keeps of one key under one policy.
type State struct {
	// Denials counted since Since (zero: none counted).
	Denials int64
	Since   time.Time
	// Until is the end of the key's current or last ban (zero: none in
	// this run).
	Until time.Time
	// Level is how many bans the key's current run has had.
	Level int
}

// Key names one policy's state of one hashed client key.
type Key struct{ Policy, Key string }

// Outcome is what counting one denial did.
type Outcome struct {
	// State is the state after the denial.
	State State
	// Started: this denial started the ban (it was the After-th).
	Started bool
}

// Banned reports whether s bans its key at t.
func (s State) Banned(t time.Time) bool { return t.Before(s.Until) }

// Length is how long a ban of the given level (0 for a run's first) lasts:
// For × Growth^level, at most Max.
func (r Rule) Length(level int) time.Duration {
	f := float64(r.For) * math.Pow(r.Growth, float64(level))
	if f >= float64(r.Max) || math.IsInf(f, 0) || math.IsNaN(f) {
		return r.Max
	}
	return time.Duration(f)
}

// LevelAt is the level a ban starting at t has: s's, or 0 when Decay has
// passed since s's last ban ended.
func (r Rule) LevelAt(s State, t time.Time) int {
	if s.Until.IsZero() || !t.Before(s.Until.Add(r.Decay)) {
		return 0
	}
	return s.Level
}

// Counting reports whether s counts denials at t: its count has started and
// Within has not passed since.
func (r Rule) Counting(s State, t time.Time) bool {
	return !s.Since.IsZero() && t.Before(s.Since.Add(r.Within))
}

// Deny counts one denial at t: what a store does, atomically, for each
// denial of a key that is not banned. A denial of a banned key changes
// nothing. The After-th denial within Within of the first starts a ban of
// the key's level and clears the count.
func (r Rule) Deny(s State, t time.Time) Outcome {
	if s.Banned(t) {
		return Outcome{State: s}
	}
	if !r.Counting(s, t) {
		s.Denials, s.Since = 0, t
	}
	s.Denials++
	if s.Denials < r.After {
		return Outcome{State: s}
	}
	return Outcome{State: r.Ban(s, t), Started: true}
}

// Ban returns s banned from t: for the length of its level at t, one
// level up, the count cleared.
func (r Rule) Ban(s State, t time.Time) State {
	lvl := r.LevelAt(s, t)
	return State{Until: t.Add(r.Length(lvl)), Level: lvl + 1}
}

// Expiry is when a state last written at t stops mattering: a count
// started by then ends within Within, a ban it starts ends within Max,
// and its level lasts Decay more. Stores set their items' TTL from it.
func (r Rule) Expiry(t time.Time) time.Time {
	return t.Add(r.Within + r.Max + r.Decay)
}
