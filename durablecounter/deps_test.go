package durablecounter_test

import (
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/depstest"
)

// TestLinksNoAWSSDK pins issue #11's "a binary links only what it uses":
// durablecounter (its Counter, its algorithms and its Memory store) linked
// 106 packages of the AWS SDK while the DynamoDB store lived in it; now
// only durablecounter/dynamostore does.
func TestLinksNoAWSSDK(t *testing.T) {
	t.Parallel()
	for _, p := range depstest.Links(t, "github.com/edgelimit/edgelimit/durablecounter") {
		if strings.HasPrefix(p, "github.com/aws/") {
			t.Errorf("durablecounter links %s", p)
		}
	}
}
