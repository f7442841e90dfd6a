// Package durable is the setup backend of the durable strategy on the
// DynamoDB table that package setup/dynamodb finds: one store for every
// durable policy, so that several on one route commit in one transaction.
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
// (the zero Config: the environment's).
func Backend(cfg dynamodb.Config) setup.Backend { return backend{cfg} }

type backend struct{ cfg dynamodb.Config }

func (backend) Strategy() *policy.Strategy { return durablecounter.Strategy }

func (b backend) Open(env *setup.BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	client, table, err := b.cfg.Open(env)
	if err != nil {
		return nil, err
	}
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
	if err != nil {
		return nil, err
	}
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		return durablecounter.New(durablecounter.Config{Policy: p, Store: store, Now: env.Now})
	}, nil
}
