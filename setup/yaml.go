//go:build !edgelimit.noyaml

package setup

import (
	"context"

	"github.com/edgelimit/edgelimit/policy"
)

// FromEnv builds a Lambda function's engine from its environment (see the
// Env* constants): the policy file with overrides and shadow switches
// applied, the hash key, each strategy's limiters from its Backend (which
// reads what it needs: the table, the key ring), JSON logs with the request
// id, and EMF metrics. Its network calls read the secrets
// EDGELIMIT_SECRET_ID and EDGELIMIT_TOKEN_SECRET_ID name (cfg.Secrets),
// when they are set, and warm each store's connection up with one cheap
// read (EDGELIMIT_STORE_WARMUP), so that the first request does not pay
// the connection's set-up within its store_timeout: a wrong table or
// missing permission is logged then, and shows up as a store error on the
// first request, which the policies' on_store_error answers.
func FromEnv(ctx context.Context, cfg EnvConfig) (*Env, error) {
	return fromEnv(ctx, cfg, policy.Decode)
}

// Built with -tags edgelimit.noyaml, setup has no FromEnv (policy has no
// YAML reader then): such a program calls FromEnvCompiled.
