package dynamodb_test

import (
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/depstest"
)

// TestBackendsLinkNoConfigLoader pins a cold-start fix of issue #16: the
// backends a Lambda function links build their DynamoDB client from the
// environment, and none may link the SDK's shared-config loader
// (aws-sdk-go-v2/config, with STS, SSO, sign-in and IMDS) or the Secrets
// Manager client. kvbucket and inflight/dynamostore imported internal/ddb
// (which has the loader, for the CLI) for its attribute names, and so
// linked it into the contact function: 327 KB of its arm64 bootstrap.
func TestBackendsLinkNoConfigLoader(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"durable", "kv", "inflight"} {
		for _, p := range depstest.Links(t, "github.com/edgelimit/edgelimit/setup/dynamodb/"+pkg) {
			switch {
			case p == "github.com/aws/aws-sdk-go-v2/config", p == "github.com/edgelimit/edgelimit/internal/ddb",
				strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2/feature/ec2/imds"),
				strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2/service/") && !strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2/service/dynamodb") &&
					!strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2/service/internal/"):
				t.Errorf("setup/dynamodb/%s links %s", pkg, p)
			}
		}
	}
}
