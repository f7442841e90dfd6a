package dynamostore_test

import (
	"testing"

	"github.com/edgelimit/edgelimit/internal/depstest"
)

// TestLinksNoConfigLoader: the store links the DynamoDB client, never the
// SDK's shared-config loader (aws-sdk-go-v2/config, with SSO and STS),
// which internal/ddb.NewClient uses for the CLI and the tests. When the
// store imported internal/ddb, every Lambda function linked it.
func TestLinksNoConfigLoader(t *testing.T) {
	t.Parallel()
	for _, p := range depstest.Links(t, "github.com/edgelimit/edgelimit/durablecounter/dynamostore") {
		if depstest.ConfigLoader(p) {
			t.Errorf("dynamostore links %s", p)
		}
	}
}
