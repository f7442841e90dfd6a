package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestExamplesAreTheREADMEs: examples/server and examples/lambda, which
// `make run-lambda` runs and a reader copies, are the README's two programs
// and its policy file, byte for byte.
func TestExamplesAreTheREADMEs(t *testing.T) {
	readme := readFile(t, "README.md")
	var blocks []string
	for _, m := range goBlock.FindAllStringSubmatch(readme, -1) {
		blocks = append(blocks, m[1])
	}
	policy := readmePolicy(t, readme)
	for _, ex := range []string{"server", "lambda"} {
		src := readFile(t, filepath.Join("examples", ex, "main.go"))
		found := false
		for _, b := range blocks {
			found = found || b == src
		}
		if !found {
			t.Errorf("examples/%s/main.go is not one of the README's Go blocks", ex)
		}
		if got := readFile(t, filepath.Join("examples", ex, "policies.yaml")); got != policy {
			t.Errorf("examples/%s/policies.yaml is not the README's policy file:\n%s\nthe README:\n%s", ex, got, policy)
		}
	}
	if len(blocks) != 2 {
		t.Errorf("the README has %d Go blocks, want the two examples", len(blocks))
	}
}

// TestInstallSteps runs the README's Install steps for a clone, as
// written, in a new module beside a clone (the repository), with the
// README's server program and policy file: the module builds, and it
// requires no AWS SDK, as the README says. The network stays off: every
// module needed is in the module cache, since the repository builds.
func TestInstallSteps(t *testing.T) {
	readme := readFile(t, "README.md")
	i := strings.Index(readme, "\n## Install\n")
	if i < 0 {
		t.Fatal("README.md has no Install section")
	}
	section := readme[i+1:]
	section = section[:strings.Index(section, "\n## ")]
	sh := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(sh) != 2 || !strings.Contains(sh[0][1], "go get github.com/edgelimit/edgelimit") {
		t.Fatalf("the Install section shows %d sh blocks, want go get and the steps for a clone", len(sh))
	}
	dir := t.TempDir()
	if err := os.Symlink(root(t), filepath.Join(dir, "edgelimit")); err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(dir, "hello")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"main.go": readFile(t, "examples/server/main.go"), "policies.yaml": readmePolicy(t, readme)} {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(line string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(goTool())+":"+os.Getenv("PATH"),
			"GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}
	run("go mod init example.com/hello")
	for _, line := range strings.Split(strings.TrimSpace(sh[1][1]), "\n") {
		// A reader's go mod tidy downloads the modules that only the tests
		// of dependencies import (testify, for aws-lambda-go's); the cache
		// need not have them, and the network is off: -e goes on without.
		if line == "go mod tidy" {
			line = "go mod tidy -e"
		}
		run(line)
	}
	run("go build -o hello .")
	gomod, err := os.ReadFile(filepath.Join(mod, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(gomod), "aws-sdk-go-v2") {
		t.Errorf("the README's server requires the AWS SDK:\n%s", gomod)
	}
	if !strings.Contains(string(gomod), "github.com/edgelimit/edgelimit v0.0.0") {
		t.Errorf("go.mod does not require edgelimit:\n%s", gomod)
	}
}
