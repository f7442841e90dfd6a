package dynamodb

import (
	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/bans/dynamostore"
	"github.com/edgelimit/edgelimit/setup"
)

// Bans returns the store of the policies' bans in the table cfg names
// (the zero Config: the environment's): what the durable and kv backends'
// OpenBans return. The functions read a key's ban with one GetItem per
// key per ban.staleness, and count a denial with one or two UpdateItems.
func (cfg Config) Bans(env *setup.BackendEnv) (edgelimit.BanStore, error) {
	client, table, err := cfg.Open(env)
	if err != nil {
		return nil, err
	}
	return dynamostore.New(dynamostore.Config{Client: client, Table: table, Now: env.Now})
}
