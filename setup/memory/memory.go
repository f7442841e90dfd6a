// Package memory is the setup backend of the durable, kv and inflight
// strategies for one process: their state in memory, exact for that process
// alone. It is what `edgelimit serve` runs on by default; instances that
// must share counts need setup/dynamodb.
package memory

import (
	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
)

// Durable returns the backend of durable policies on one Memory store, so
// that several on one route are decided together.
func Durable() setup.Backend { return durable{} }

type durable struct{}

func (durable) Strategy() *policy.Strategy { return durablecounter.Strategy }

func (durable) Open(env *setup.BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		return durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: env.Now})
	}, nil
}

// KV returns the backend of kv policies on one in-memory KV.
func KV() setup.Backend { return kv{} }

type kv struct{}

func (kv) Strategy() *policy.Strategy { return kvbucket.Strategy }

func (kv) Open(env *setup.BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	store := kvbucket.NewMemory(kvbucket.MemoryConfig{Now: env.Now})
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		return kvbucket.New(kvbucket.Config{Policy: p, KV: store, Now: env.Now})
	}, nil
}

// InFlight returns the backend of inflight policies on one in-memory store
// of slots.
func InFlight() setup.Backend { return inFlight{} }

type inFlight struct{}

func (inFlight) Strategy() *policy.Strategy { return inflight.Strategy }

func (inFlight) Open(env *setup.BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	store := inflight.NewMemory(inflight.MemoryConfig{})
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		return inflight.New(inflight.Config{Policy: p, Store: store, Now: env.Now})
	}, nil
}
