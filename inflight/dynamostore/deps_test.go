package dynamostore_test

import (
	"testing"

	"github.com/edgelimit/edgelimit/internal/depstest"
)

// TestLinksNoConfigLoader: the store links the DynamoDB client, never the
// SDK's shared-config loader (aws-sdk-go-v2/config, with SSO and STS),
// which internal/ddb.NewClient uses for the CLI and the tests. It imported
// internal/ddb, and so the tts function, the first with an inflight policy,
// linked STS, SSO and the shared-config parser: 10.03 MB on linux/arm64,
// over the 10 MB budget of e2e.TestColdStart (9.50 MB without them).
func TestLinksNoConfigLoader(t *testing.T) {
	t.Parallel()
	for _, p := range depstest.Links(t, "github.com/edgelimit/edgelimit/inflight/dynamostore") {
		if depstest.ConfigLoader(p) {
			t.Errorf("dynamostore links %s", p)
		}
	}
}
