package setup

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Environment variables naming Secrets Manager secrets, read at start-up
// in place of the secrets' own variables (template.yaml sets them).
const (
	// EnvSecretID names the secret (a name or an ARN) holding a JSON object
	// whose hash_key is EDGELIMIT_HASH_KEY's value and whose token_secrets,
	// if present, is EDGELIMIT_SECRETS'. Set it, or EDGELIMIT_HASH_KEY, not
	// both.
	EnvSecretID = "EDGELIMIT_SECRET_ID"
	// EnvTokenSecretID names the secret whose token_secrets is the key ring
	// of signed policies (EDGELIMIT_SECRETS), when it is not in
	// EDGELIMIT_SECRET_ID's: so that only the functions that sign can read
	// it.
	EnvTokenSecretID = "EDGELIMIT_TOKEN_SECRET_ID"
)

// SecretSource reads a secret's string at start-up: setup/secretsmanager's
// Source reads AWS Secrets Manager.
type SecretSource interface {
	SecretString(ctx context.Context, getenv func(string) string, id string) (string, error)
}

// secretFields is the JSON object a secret holds.
type secretFields struct {
	HashKey      *string `json:"hash_key"`
	TokenSecrets *string `json:"token_secrets"`
}

// withSecrets returns getenv with EDGELIMIT_HASH_KEY and EDGELIMIT_SECRETS
// answered from the secrets EDGELIMIT_SECRET_ID and
// EDGELIMIT_TOKEN_SECRET_ID name, read once each (one call when they name
// the same secret); getenv itself when neither is set. A value set both
// ways is an error, as is a secret that is not the JSON object expected.
// No message ever quotes a secret's content.
func withSecrets(ctx context.Context, getenv func(string) string, src SecretSource) (func(string) string, error) {
	hashID, tokenID := strings.TrimSpace(getenv(EnvSecretID)), strings.TrimSpace(getenv(EnvTokenSecretID))
	if hashID == "" && tokenID == "" {
		return getenv, nil
	}
	if src == nil {
		return nil, fmt.Errorf("%w: %s or %s is set, but this program reads no secrets: pass setup/secretsmanager.Source() in EnvConfig.Secrets",
			ErrEnv, EnvSecretID, EnvTokenSecretID)
	}
	if hashID != "" && getenv(EnvHashKey) != "" {
		return nil, fmt.Errorf("%w: both %s and %s are set; set one (the secret on AWS, the variable locally)", ErrEnv, EnvSecretID, EnvHashKey)
	}
	if tokenID != "" && getenv(EnvSecrets) != "" {
		return nil, fmt.Errorf("%w: both %s and %s are set; set one", ErrEnv, EnvTokenSecretID, EnvSecrets)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	read := map[string]secretFields{}
	fields := func(id string) (secretFields, error) {
		if f, ok := read[id]; ok {
			return f, nil
		}
		s, err := src.SecretString(cctx, getenv, id)
		if err != nil {
			return secretFields{}, err
		}
		var f secretFields
		if err := json.Unmarshal([]byte(s), &f); err != nil {
			return secretFields{}, fmt.Errorf("%w: secret %s is not a JSON object like {\"hash_key\":\"<base64>\",\"token_secrets\":\"kid:<base64>\"}", ErrEnv, id)
		}
		read[id] = f
		return f, nil
	}
	over := map[string]string{}
	if hashID != "" {
		f, err := fields(hashID)
		if err != nil {
			return nil, err
		}
		if f.HashKey == nil {
			return nil, fmt.Errorf("%w: secret %s has no hash_key", ErrEnv, hashID)
		}
		over[EnvHashKey] = *f.HashKey
		if f.TokenSecrets != nil && tokenID == "" && getenv(EnvSecrets) == "" {
			over[EnvSecrets] = *f.TokenSecrets
		}
	}
	if tokenID != "" {
		f, err := fields(tokenID)
		if err != nil {
			return nil, err
		}
		if f.TokenSecrets == nil {
			return nil, fmt.Errorf("%w: secret %s has no token_secrets", ErrEnv, tokenID)
		}
		over[EnvSecrets] = *f.TokenSecrets
	}
	return func(k string) string {
		if v, ok := over[k]; ok {
			return v
		}
		return getenv(k)
	}, nil
}
