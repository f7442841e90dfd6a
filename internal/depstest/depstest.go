// Package depstest lists what a package links, for the tests that pin a
// binary to what it uses (no AWS SDK in a strategy's algorithms, no SDK
// config loader in a DynamoDB store).
package depstest

import (
	"os/exec"
	"strings"
	"testing"
)

// Links returns the packages pkg links (go list -deps), failing t when the
// go command cannot say.
func Links(t testing.TB, pkg string) []string {
	t.Helper()
	// go list shares the module and build caches with the other packages'
	// tests running at the same time; one failed once in a clean-clone run,
	// its reason unsaid. Say the reason, and ask a second time before failing.
	var stderr strings.Builder
	for attempt := 1; ; attempt++ {
		stderr.Reset()
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		switch {
		case err == nil:
			return strings.Fields(string(out))
		case attempt == 1:
			t.Logf("go list -deps %s: %v: %s (asking again)", pkg, err, strings.TrimSpace(stderr.String()))
		default:
			t.Fatalf("go list -deps %s: %v: %s", pkg, err, strings.TrimSpace(stderr.String()))
		}
	}
}

// ConfigLoader reports whether p is part of the AWS SDK's shared-config
// loader (aws-sdk-go-v2/config and the SSO and STS clients it brings),
// which a Lambda function never needs: Lambda puts the credentials and the
// region in the environment.
func ConfigLoader(p string) bool {
	return p == "github.com/aws/aws-sdk-go-v2/config" ||
		strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2/service/sso") ||
		strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2/service/sts")
}
