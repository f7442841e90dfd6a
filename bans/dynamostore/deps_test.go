package dynamostore_test

import (
	"testing"

	"github.com/edgelimit/edgelimit/internal/depstest"
)

// TestLinksNoConfigLoader: the ban store links the DynamoDB client, never
// the SDK's shared-config loader (aws-sdk-go-v2/config, with SSO and STS),
// which internal/ddb.NewClient uses for the CLI and the tests: every
// function with a banning policy links this package.
func TestLinksNoConfigLoader(t *testing.T) {
	t.Parallel()
	for _, p := range depstest.Links(t, "github.com/edgelimit/edgelimit/bans/dynamostore") {
		if depstest.ConfigLoader(p) {
			t.Errorf("bans/dynamostore links %s", p)
		}
	}
}
