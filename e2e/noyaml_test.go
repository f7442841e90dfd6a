package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/functions/handlers"
)

// TestFunctionsLinkNoYAML: built as make builds them (-tags
// edgelimit.noyaml among lambdaTags), the example functions import no YAML
// library, not even for its package init: their policy files are compiled
// trees (functions/handlers/trees_gen.go).
func TestFunctionsLinkNoYAML(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range handlers.All() {
		cmd := exec.Command(goTool(), "list", "-deps", "-tags", lambdaTags, "./functions/"+f.Name)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", f.Name, err)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if strings.Contains(pkg, "yaml") {
				t.Errorf("functions/%s imports %s", f.Name, pkg)
			}
		}
	}
}
