//go:build !edgelimit.nopowgate

package setup

import (
	"fmt"
	"strings"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/keyring"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/powgate"
)

// The proof-of-work gate of durable and kv policies with proof_of_work
// (gating), in its own file so that a program built with -tags
// edgelimit.nopowgate (the example Lambda functions, whose policy files
// have none) links neither powgate's gate, package pow, nor the key ring's
// parser for it.
func init() { gate = powGate }

func powGate(factory func(*policy.Policy) (edgelimit.Limiter, error), gated []string, env BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	entries, err := keyring.Parse(env.Getenv(EnvSecrets))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEnv, err) // names entries, never secrets
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: %s is not set; policies %s ask for proof of work above a threshold, and its challenges are keyed by that key ring (kid:base64 entries, newest first)",
			ErrEnv, EnvSecrets, strings.Join(gated, ", "))
	}
	return powgate.Gating(factory, powgate.Config{Secrets: keyring.Secrets(entries), Now: env.Now, Logger: env.Logger,
		Replay: pow.NewReplayCache(0)}), nil
}
