// Package inflight is the setup backend of the inflight strategy on the
// DynamoDB table that package setup/dynamodb finds: one store of slots for
// every inflight policy, shared by every instance that uses the table.
package inflight

import (
	"github.com/edgelimit/edgelimit"
	limit "github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/inflight/dynamostore"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
)

// Backend returns the backend of inflight policies on the table cfg names
// (the zero Config: the environment's), with the override store in the
// same table.
func Backend(cfg dynamodb.Config) setup.Backend { return full{slots{cfg}} }

// Slots is Backend without the override store, for a program whose
// inflight policies take no overrides (the tts function): it does not link
// it, and a policy with overrides is refused at start-up, by name.
func Slots(cfg dynamodb.Config) setup.Backend { return slots{cfg} }

type slots struct{ cfg dynamodb.Config }

// full is slots with the override store (overrides.go).
type full struct{ slots }

func (slots) Strategy() *policy.Strategy { return limit.Strategy }

func (b slots) Open(env *setup.BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	client, table, err := b.cfg.Open(env)
	if err != nil {
		return nil, err
	}
	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
	if err != nil {
		return nil, err
	}
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		return limit.New(limit.Config{Policy: p, Store: store, Now: env.Now})
	}, nil
}
