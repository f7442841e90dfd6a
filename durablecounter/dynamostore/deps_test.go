package dynamostore_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoConfigLoader: the store links the DynamoDB client, never the
// SDK's shared-config loader (aws-sdk-go-v2/config, with SSO and STS),
// which internal/ddb.NewClient uses for the CLI and the tests. When the
// store imported internal/ddb, every Lambda function linked it.
func TestLinksNoConfigLoader(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/edgelimit/edgelimit/durablecounter/dynamostore").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "github.com/aws/aws-sdk-go-v2/config" || strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2/service/sso") || strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2/service/sts") {
			t.Errorf("dynamostore links %s", p)
		}
	}
}
