// Package kv is the setup backend of the kv strategy on the DynamoDB table
// that package setup/dynamodb finds.
package kv

import (
	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
)

// Backend returns the backend of kv policies on the table cfg names (the
// zero Config: the environment's).
func Backend(cfg dynamodb.Config) setup.Backend { return backend{cfg} }

type backend struct{ cfg dynamodb.Config }

func (backend) Strategy() *edgelimit.Strategy { return kvbucket.Strategy }

func (b backend) Open(env *setup.BackendEnv) (func(*edgelimit.Policy) (edgelimit.Limiter, error), error) {
	client, table, err := b.cfg.Open(env)
	if err != nil {
		return nil, err
	}
	store, err := kvbucket.NewDynamoDB(kvbucket.DynamoDBConfig{Client: client, Table: table, Now: env.Now})
	if err != nil {
		return nil, err
	}
	return func(p *edgelimit.Policy) (edgelimit.Limiter, error) {
		return kvbucket.New(kvbucket.Config{Policy: p, KV: store, Now: env.Now})
	}, nil
}
