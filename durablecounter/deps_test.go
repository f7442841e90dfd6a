package durablecounter_test

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

// TestLinksNoAWSSDK pins issue #11's "a binary links only what it uses":
// durablecounter (its Counter, its algorithms and its Memory store) linked
// 106 packages of the AWS SDK while the DynamoDB store lived in it; now
// only durablecounter/dynamostore does.
func TestLinksNoAWSSDK(t *testing.T) {
	t.Parallel()
	for _, p := range deps(t, "github.com/edgelimit/edgelimit/durablecounter") {
		if strings.HasPrefix(p, "github.com/aws/") {
			t.Errorf("durablecounter links %s", p)
		}
	}
}
