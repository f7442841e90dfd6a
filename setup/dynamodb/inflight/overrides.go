package inflight

import (
	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/setup"
)

// OpenOverrides keeps the operators' per-key overrides in the same table.
func (b full) OpenOverrides(env *setup.BackendEnv) (edgelimit.OverrideStore, error) {
	return b.cfg.Overrides(env)
}
