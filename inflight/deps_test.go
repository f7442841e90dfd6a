package inflight_test

import (
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/depstest"
)

// TestLinksNoAWSSDK: inflight (its Limiter and its Memory store) links none
// of the AWS SDK, as every strategy's own package; only
// inflight/dynamostore does.
func TestLinksNoAWSSDK(t *testing.T) {
	t.Parallel()
	for _, p := range depstest.Links(t, "github.com/edgelimit/edgelimit/inflight") {
		if strings.HasPrefix(p, "github.com/aws/") {
			t.Errorf("inflight links %s", p)
		}
	}
}
