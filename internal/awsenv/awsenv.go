// Package awsenv builds what an AWS SDK client needs from the variables
// Lambda sets (AWS_REGION and the execution role's AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), without the SDK's config
// loader: that loader's shared-config, SSO and STS code would be linked
// into every function and run on every cold start for nothing.
package awsenv

import (
	"errors"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Client is what a service client's Options need.
type Client struct {
	Region      string
	Credentials aws.CredentialsProvider
	HTTPClient  aws.HTTPClient
}

// ErrRegion and ErrCredentials say what is missing.
var (
	ErrRegion      = errors.New("AWS_REGION is not set (Lambda sets it; set it when running elsewhere)")
	ErrCredentials = errors.New("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set (Lambda sets them from the execution role; set them elsewhere)")
)

// FromEnv reads the region and credentials. With a local endpoint
// (local true: a test server) a missing region is us-east-1 and missing
// credentials are placeholders.
func FromEnv(getenv func(string) string, local bool, maxConns int) (Client, error) {
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	id, secret, session := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SESSION_TOKEN")
	if local {
		if region == "" {
			region = "us-east-1"
		}
		if id == "" || secret == "" {
			id, secret, session = "local", "local", ""
		}
	}
	switch {
	case region == "":
		return Client{}, ErrRegion
	case id == "" || secret == "":
		return Client{}, ErrCredentials
	}
	// AWS_CA_BUNDLE is honoured by the buildable client.
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConns = maxConns
		tr.MaxIdleConnsPerHost = maxConns
	})
	return Client{Region: region, Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(id, secret, session)), HTTPClient: hc}, nil
}
