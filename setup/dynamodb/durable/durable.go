// Package durable is the setup backend of the durable strategy on the
// DynamoDB table that package setup/dynamodb finds: one store for every
// durable policy, so that several on one route commit in one transaction.
//
// Backend links every algorithm, the in-process twin of on_store_error:
// local, and the override and ban stores. A program that knows which of
// them its policies use (the example Lambda functions, whose policy files
// are compiled in) builds its backend with Counters or
// CountersWithOverridesAndBans instead, naming the durablecounter Code it
// links, and so links nothing else: a policy that asks for what it did not
// link is refused at start-up with an error that names it.
package durable

import (
	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
)

// Backend returns the backend of durable policies on the table cfg names
// (the zero Config: the environment's), with every algorithm, the
// in-process twin, and the override and ban stores in the same table.
func Backend(cfg dynamodb.Config) setup.Backend {
	return full{counters{cfg: cfg, newCounter: durablecounter.New}}
}

// Counters returns the backend of durable policies on the table cfg names
// that links only the given durablecounter Code (durablecounter.NewLinked),
// and no override or ban store: a policy with another algorithm, with
// on_store_error: local without durablecounter.MemoryCode, with overrides
// or with a ban is refused at start-up, by name.
func Counters(cfg dynamodb.Config, code ...durablecounter.Code) setup.Backend {
	return counters{cfg: cfg, code: code}
}

// CountersWithOverridesAndBans is Counters with the override and ban
// stores in the same table (as Backend has them).
func CountersWithOverridesAndBans(cfg dynamodb.Config, code ...durablecounter.Code) setup.Backend {
	return full{counters{cfg: cfg, code: code}}
}

// counters is the backend without override and ban stores; newCounter,
// if set, builds each Counter (Backend's: durablecounter.New), else
// durablecounter.NewLinked with code.
type counters struct {
	cfg        dynamodb.Config
	code       []durablecounter.Code
	newCounter func(durablecounter.Config) (*durablecounter.Counter, error)
}

func (counters) Strategy() *policy.Strategy { return durablecounter.Strategy }

func (b counters) Open(env *setup.BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	client, table, err := b.cfg.Open(env)
	if err != nil {
		return nil, err
	}
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
	if err != nil {
		return nil, err
	}
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		cfg := durablecounter.Config{Policy: p, Store: store, Now: env.Now}
		if b.newCounter != nil {
			return b.newCounter(cfg)
		}
		return durablecounter.NewLinked(cfg, b.code...)
	}, nil
}

// full is counters with the override and ban stores (overrides.go,
// bans.go).
type full struct{ counters }
