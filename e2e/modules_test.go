package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestImportersGetOnlyWhatTheyUse: a module that imports pow, the root
// package, or a strategy's SDK-free package (durablecounter, kvbucket,
// inflight with their memory stores), gets from `go mod tidy` only the requirements those packages
// need — no AWS SDK, no aws-lambda-go, no testify (issue #11.7).
func TestImportersGetOnlyWhatTheyUse(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		forbidden []string
	}{
		{"github.com/edgelimit/edgelimit/pow", []string{"aws", "testify", "yaml", "jwt"}},
		{"github.com/edgelimit/edgelimit", []string{"aws", "testify", "jwt"}},
		{"github.com/edgelimit/edgelimit/durablecounter", []string{"aws", "testify", "jwt"}},
		{"github.com/edgelimit/edgelimit/kvbucket", []string{"aws", "testify", "jwt"}},
		{"github.com/edgelimit/edgelimit/inflight", []string{"aws", "testify", "jwt"}},
	} {
		t.Run(filepath.Base(tc.pkg), func(t *testing.T) {
			gomod := tidyImporter(t, tc.pkg)
			t.Logf("%s", gomod)
			for _, f := range tc.forbidden {
				for _, line := range strings.Split(gomod, "\n") {
					if strings.Contains(line, f) && !strings.Contains(line, "edgelimit") {
						t.Errorf("a module importing only %s requires %s", tc.pkg, strings.TrimSpace(line))
					}
				}
			}
		})
	}
}

// tidyImporter writes a module whose one file imports pkg (the repository
// replaced by its working tree), runs go mod tidy with no network (every
// module it needs is in the module cache, since the repository builds),
// and returns the resulting go.mod.
func tidyImporter(t *testing.T, pkg string) string {
	t.Helper()
	dir := t.TempDir()
	mod := "module importer.example\n\ngo 1.26\n\nrequire github.com/edgelimit/edgelimit v0.0.0\n\nreplace github.com/edgelimit/edgelimit => " + root(t) + "\n"
	src := "package importer\n\nimport _ \"" + pkg + "\"\n"
	for name, body := range map[string]string{"go.mod": mod, "importer.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := os.ReadFile(filepath.Join(root(t), "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "mod", "tidy")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
