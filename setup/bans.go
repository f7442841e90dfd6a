package setup

import (
	"fmt"
	"os"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
)

// BanBackend is a Backend whose store can also keep the bans of the
// policies with a ban field: setup/dynamodb's durable and kv backends keep
// them in the same table, setup/memory's in the process.
type BanBackend interface {
	Backend
	// OpenBans returns the ban store, once, at start-up.
	OpenBans(env *BackendEnv) (edgelimit.BanStore, error)
}

// Bans returns the edgelimit.Config.Bans store that pf's policies need:
// nil when none has a ban, else that of the backend of the first such
// policy's strategy (one store serves every policy). A policy with a ban
// whose backend cannot keep bans is an error that names it.
func Bans(pf *policy.File, backends []Backend, env BackendEnv) (edgelimit.BanStore, error) {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	for _, p := range pf.Policies {
		if p.Ban == nil {
			continue
		}
		for _, b := range backends {
			if b.Strategy() != p.Strategy {
				continue
			}
			bb, ok := b.(BanBackend)
			if !ok {
				break
			}
			env.Policies = []*policy.Policy{p}
			return bb.OpenBans(&env)
		}
		return nil, fmt.Errorf("%w: policy %s has a ban, but this program's %s backend keeps no bans", ErrEnv, p.Name, p.StrategyName())
	}
	return nil, nil
}
