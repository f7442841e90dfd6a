package bans_test

import (
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/internal/depstest"
)

// TestLinksNoAWSSDK: the memory store (and the package a program names to
// get it) links no AWS SDK: `edgelimit serve --store memory` and the
// functions' unit tests keep bans without DynamoDB, which only
// bans/dynamostore links.
func TestLinksNoAWSSDK(t *testing.T) {
	t.Parallel()
	for _, p := range depstest.Links(t, "github.com/edgelimit/edgelimit/bans") {
		if strings.HasPrefix(p, "github.com/aws/") {
			t.Errorf("bans links %s", p)
		}
	}
}
