package memory

import (
	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/bans"
	"github.com/edgelimit/edgelimit/setup"
)

// OpenBans keeps the bans in this process.
func (durable) OpenBans(env *setup.BackendEnv) (edgelimit.BanStore, error) {
	return bans.NewMemory(env.Now), nil
}

// OpenBans keeps the bans in this process.
func (kv) OpenBans(env *setup.BackendEnv) (edgelimit.BanStore, error) {
	return bans.NewMemory(env.Now), nil
}
