package depstest_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/edgelimit/edgelimit"

// mayImport says which of the module's packages a package may import,
// besides internal/... and its own subtree (durablecounter/dynamostore may
// import durablecounter and durablecounter/internal/wire), by the first
// element of its path ("" is the root package). ARCHITECTURE.md's Layout
// draws the same layers: policy, the contract, the mechanisms, setup, the
// programs; a package imports only from the layers below it, and the
// mechanisms (each strategy, the adapters, the suite) not from each other.
// A package whose first element is missing here fails the test: place it.
var mayImport = map[string][]string{
	"policy":         nil,
	"":               {"policy"},
	"pow":            nil,
	"powgate":        {"", "policy", "pow"},
	"durablecounter": {"", "policy", "pow", "powgate"},
	"kvbucket":       {"", "policy", "pow", "powgate"},
	"inflight":       {"", "policy", "pow", "powgate"},
	"signedwindow":   {"", "policy", "pow", "powgate"},
	"limitertest":    {"", "policy"},
	"middleware":     {"", "policy"},
	"metrics":        {"", "policy"},
	"overrides":      {"", "policy"},
	"client":         {"", "policy", "pow"},
	// setup's own package names no strategy (see setupCore); its backends,
	// setup/<store>, each import their strategies.
	"setup": {"", "policy", "pow", "powgate", "metrics", "overrides", "durablecounter", "kvbucket", "inflight", "signedwindow"},
	// The programs and their tests may import anything.
	"cmd": nil, "functions": nil, "examples": nil, "e2e": nil,
}

// programs are the first elements whose packages may import anything.
var programs = map[string]bool{"cmd": true, "functions": true, "examples": true, "e2e": true}

// setupCore is what package setup itself may import: it builds an engine
// from a file and backends, and names no strategy, so that a program links
// only the strategies its backends bring.
var setupCore = []string{"", "policy", "pow", "powgate", "metrics"}

// top returns rel's first path element.
func top(rel string) string {
	first, _, _ := strings.Cut(rel, "/")
	return first
}

// TestLayers: every package of the module imports only what its layer may
// (mayImport), so that the dependency direction ARCHITECTURE.md describes
// is the code's: policy knows nothing of the engine, the root package
// nothing of a strategy, a strategy nothing of another, of setup, of the
// adapters or of the conformance suite.
func TestLayers(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rel := func(p string) (string, bool) {
		switch {
		case p == module:
			return "", true
		case strings.HasPrefix(p, module+"/"):
			return strings.TrimPrefix(p, module+"/"), true
		}
		return "", false
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		from, _ := rel(fields[0])
		layer := top(from)
		if strings.HasPrefix(from, "internal/") {
			continue // helpers: below every layer (internal/tools are programs)
		}
		allowed, known := mayImport[layer]
		if !known {
			t.Errorf("package %s is in no layer: add %q to mayImport (and to ARCHITECTURE.md's Layout)", fields[0], layer)
			continue
		}
		if programs[layer] {
			continue
		}
		if from == "setup" {
			allowed = setupCore
		}
		checked++
		for _, imp := range fields[1:] {
			to, ours := rel(imp)
			if !ours || strings.HasPrefix(to, "internal/") || (layer != "" && top(to) == layer) {
				continue
			}
			ok := false
			for _, a := range allowed {
				if top(to) == a && (a != "" || to == "") {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s imports %s: against the layers (mayImport[%q] = %q)", fields[0], imp, layer, allowed)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d packages", checked)
	}
}
