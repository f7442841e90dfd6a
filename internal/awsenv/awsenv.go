// Package awsenv reads what a call to an AWS service needs from the
// variables Lambda sets (AWS_REGION and the execution role's
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), and signs
// requests with Signature Version 4, without the AWS SDK: a function that
// makes one or two calls at start-up (setup/secretsmanager) then links
// net/http and crypto/hmac only, where the SDK's service client, its
// endpoint rules and its schemas cost about a megabyte of every bootstrap and
// a quarter of a millisecond of every cold start's package init.
//
// Sign produces the same Authorization header as aws-sdk-go-v2's
// aws/signer/v4 for the same request, credentials and instant (a test
// checks, and checks the AWS documentation's test vector).
package awsenv

import (
	"errors"
)

// Credentials are an access key, with the session token of temporary
// credentials (Lambda's execution role always has one).
type Credentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
}

// Env is a region and the credentials to sign with there.
type Env struct {
	Region      string
	Credentials Credentials
}

// ErrRegion and ErrCredentials say what is missing.
var (
	ErrRegion      = errors.New("awsenv: AWS_REGION is not set (Lambda sets it; set it when running elsewhere)")
	ErrCredentials = errors.New("awsenv: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set (Lambda sets them from the execution role; set them elsewhere)")
)

// FromEnv reads the region and credentials. With a local endpoint (local
// true: a test server) a missing region is us-east-1 and missing
// credentials are placeholders.
func FromEnv(getenv func(string) string, local bool) (Env, error) {
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	c := Credentials{getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SESSION_TOKEN")}
	if local {
		if region == "" {
			region = "us-east-1"
		}
		if c.AccessKeyID == "" || c.SecretAccessKey == "" {
			c = Credentials{"local", "local", ""}
		}
	}
	switch {
	case region == "":
		return Env{}, ErrRegion
	case c.AccessKeyID == "" || c.SecretAccessKey == "":
		return Env{}, ErrCredentials
	}
	return Env{Region: region, Credentials: c}, nil
}
