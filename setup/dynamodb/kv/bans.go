package kv

import (
	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/setup"
)

// OpenBans keeps the policies' bans in the same table.
func (b full) OpenBans(env *setup.BackendEnv) (edgelimit.BanStore, error) {
	return b.cfg.Bans(env)
}
