package dynamodb

import (
	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/overrides/dynamostore"
	"github.com/edgelimit/edgelimit/setup"
)

// Overrides returns the store of the operators' per-key overrides in the
// table cfg names (the zero Config: the environment's): what the durable
// and kv backends' OpenOverrides return. The functions read an override
// with one GetItem per key per override_staleness.
func (cfg Config) Overrides(env *setup.BackendEnv) (edgelimit.OverrideStore, error) {
	client, table, err := cfg.Open(env)
	if err != nil {
		return nil, err
	}
	return dynamostore.New(dynamostore.Config{Client: client, Table: table, Now: env.Now})
}
