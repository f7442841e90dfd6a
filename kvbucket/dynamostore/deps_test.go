package dynamostore_test

import (
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/depstest"
)

// TestLinksNoConfigLoader: the store links the DynamoDB client, never the
// SDK's shared-config loader (aws-sdk-go-v2/config, with SSO and STS),
// which internal/ddb.NewClient uses for the CLI and the tests. When the kv
// KV imported internal/ddb, every kv Lambda function linked it.
func TestLinksNoConfigLoader(t *testing.T) {
	t.Parallel()
	for _, p := range depstest.Links(t, "github.com/edgelimit/edgelimit/kvbucket/dynamostore") {
		if p == "github.com/aws/aws-sdk-go-v2/config" || p == "github.com/edgelimit/edgelimit/internal/ddb" ||
			strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2/service/sso") || strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2/service/sts") {
			t.Errorf("dynamostore links %s", p)
		}
	}
}
