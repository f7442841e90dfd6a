package kvbucket_test

import (
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/depstest"
)

// TestLinksNoAWSSDK pins issue #11's "a binary links only what it uses"
// for kv: kvbucket (its Bucket, its algorithm and its Memory KV) linked the
// AWS SDK, and through internal/ddb its shared-config loader, while the
// DynamoDB KV lived in it; now only kvbucket/dynamostore does.
func TestLinksNoAWSSDK(t *testing.T) {
	t.Parallel()
	for _, p := range depstest.Links(t, "github.com/edgelimit/edgelimit/kvbucket") {
		if strings.HasPrefix(p, "github.com/aws/") {
			t.Errorf("kvbucket links %s", p)
		}
	}
}
