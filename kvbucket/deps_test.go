package kvbucket_test

import (
	"os/exec"
	"strings"
	"testing"
)

// deps returns the packages pkg links (go list -deps).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestLinksNoAWSSDK pins issue #11's "a binary links only what it uses"
// for kv: kvbucket (its Bucket, its algorithm and its Memory KV) linked the
// AWS SDK, and through internal/ddb its shared-config loader, while the
// DynamoDB KV lived in it; now only kvbucket/dynamostore does.
func TestLinksNoAWSSDK(t *testing.T) {
	t.Parallel()
	for _, p := range deps(t, "github.com/edgelimit/edgelimit/kvbucket") {
		if strings.HasPrefix(p, "github.com/aws/") {
			t.Errorf("kvbucket links %s", p)
		}
	}
}
