package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chromiumPath finds Debian's Chromium. Absent, the browser test skips on a
// developer's machine and fails in CI, whose .ci/run installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("Chromium is not installed: .ci/run installs Debian's chromium package")
	}
	t.Skip("Chromium not installed (apt-get install chromium); skipping the browser demo test")
	return ""
}

// The demo page served by edgelimit serve solves a 14-bit challenge in a
// real browser (pow.js in Web Workers) and gets the signed route's allowed
// response.
func TestBrowserDemoSolvesChallenge(t *testing.T) {
	chromium := chromiumPath(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	script, _ := filepath.Abs("testdata/browser_demo.mjs")
	if _, err := os.Stat("../../node_modules/playwright-core"); err != nil {
		t.Fatal("playwright-core is not installed: run `make deps` (npm ci)")
	}
	url := startServe(t, "--policies", writePolicies(t, strings.Replace(signedPolicies, "bits: 8", "bits: 14", 1)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, url+"/?auto=1", chromium)
	cmd.Dir = "../.." // node resolves playwright-core from the repository's node_modules
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join("..", "..", "node_modules"))
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("browser run failed: %v\n%s", err, stderr)
	}
	var got struct {
		State, Status, Remaining, Work string
		Log, Errors                    []string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("browser output %q: %v", out, err)
	}
	if got.State != "allowed" || !strings.Contains(got.Status, "200") || got.Remaining != "9" || len(got.Errors) > 0 {
		t.Errorf("page after solving: %+v; want allowed, status 200, remaining 9, no errors", got)
	}
	if !strings.Contains(got.Work, "14") {
		t.Errorf("work = %q, want it to mention the 14-bit challenge", got.Work)
	}
}
