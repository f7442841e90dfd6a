package memory

import (
	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/overrides"
	"github.com/edgelimit/edgelimit/setup"
)

// OpenOverrides keeps the operators' per-key overrides in this process.
func (durable) OpenOverrides(env *setup.BackendEnv) (edgelimit.OverrideStore, error) {
	return overrides.NewMemory(env.Now), nil
}

// OpenOverrides keeps the operators' per-key overrides in this process.
func (kv) OpenOverrides(env *setup.BackendEnv) (edgelimit.OverrideStore, error) {
	return overrides.NewMemory(env.Now), nil
}
