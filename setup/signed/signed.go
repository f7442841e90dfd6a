// Package signed is the setup backend of the signed strategy: no state, a
// key ring that signs window tokens and keys proof-of-work challenges, read
// from EDGELIMIT_SECRETS (setup.EnvSecrets) or given.
package signed

import (
	"fmt"
	"strings"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/signedwindow"
)

// Backend returns the backend of signed policies with the key ring from
// EDGELIMIT_SECRETS: kid:base64 entries, comma separated, newest first (see
// signedwindow.ParseKeyRing).
func Backend() setup.Backend { return backend{} }

// WithKeys returns the backend of signed policies with the given key ring.
func WithKeys(keys *signedwindow.KeyRing) setup.Backend { return backend{keys: keys} }

type backend struct{ keys *signedwindow.KeyRing }

func (backend) Strategy() *policy.Strategy { return signedwindow.Strategy }

func (b backend) Open(env *setup.BackendEnv) (func(*policy.Policy) (edgelimit.Limiter, error), error) {
	keys := b.keys
	if keys == nil {
		ring := env.Getenv(setup.EnvSecrets)
		if strings.TrimSpace(ring) == "" {
			return nil, fmt.Errorf("%w: %s is not set; signed policies %s need a key ring of kid:base64 entries (each key at least %d bytes), newest first",
				setup.ErrEnv, setup.EnvSecrets, env.PolicyNames(), 32)
		}
		var err error
		if keys, err = signedwindow.ParseKeyRing(ring); err != nil {
			return nil, fmt.Errorf("%w: %w", setup.ErrEnv, err) // names entries, never secrets
		}
	}
	return signedwindow.NewFactory(signedwindow.Config{Keys: keys, Now: env.Now, Logger: env.Logger}), nil
}
