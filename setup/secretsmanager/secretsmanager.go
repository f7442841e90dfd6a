// Package secretsmanager reads the functions' secrets from AWS Secrets
// Manager when they start (setup.EnvSecretID, setup.EnvTokenSecretID), so
// that the hash key and the token key ring are never part of a function's
// configuration, where anyone allowed lambda:GetFunctionConfiguration could
// read them. It costs one GetSecretValue per secret per cold start (about
// 20-40 ms in the same region) and the permission secretsmanager:
// GetSecretValue on those secrets only.
package secretsmanager

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	sm "github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/edgelimit/edgelimit/internal/awsenv"
	"github.com/edgelimit/edgelimit/setup"
)

// EnvEndpoint overrides the Secrets Manager endpoint (a local server, a VPC
// endpoint): the SDK's own variable name for it.
const EnvEndpoint = "AWS_ENDPOINT_URL_SECRETS_MANAGER"

// Source returns the setup.SecretSource that reads secrets from Secrets
// Manager, with a client built from the environment on first use: the
// region and the execution role's credentials that Lambda sets.
func Source() setup.SecretSource { return source{} }

type source struct{}

// SecretString reads the current version of the secret id (a name or an
// ARN).
func (source) SecretString(ctx context.Context, getenv func(string) string, id string) (string, error) {
	endpoint := strings.TrimSpace(getenv(EnvEndpoint))
	if endpoint == "" {
		endpoint = strings.TrimSpace(getenv("AWS_ENDPOINT_URL"))
	}
	c, err := awsenv.FromEnv(getenv, endpoint != "", 4)
	if err != nil {
		return "", fmt.Errorf("%w: reading secret %s: %w", setup.ErrEnv, id, err)
	}
	opts := sm.Options{Region: c.Region, Credentials: c.Credentials, HTTPClient: c.HTTPClient}
	if endpoint != "" {
		opts.BaseEndpoint = aws.String(endpoint)
	}
	out, err := sm.New(opts).GetSecretValue(ctx, &sm.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", fmt.Errorf("secretsmanager: GetSecretValue of %s: %w", id, err)
	}
	if out.SecretString == nil {
		return "", errors.New("secretsmanager: secret " + id + " holds binary data, not the JSON object edgelimit reads")
	}
	return *out.SecretString, nil
}
