package handlers_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/policy"
)

// TestTreesAreGenerated: each function's compiled tree (trees_gen.go,
// what its bootstrap parses) is its embedded YAML's, so the two can never
// drift: a policy file edited without `make generate` fails here.
func TestTreesAreGenerated(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("policies", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(handlers.All()) {
		t.Errorf("policies/ has %d files, the functions %d: each file is one function's", len(files), len(handlers.All()))
	}
	for _, f := range handlers.All() {
		want, err := policy.Decode(f.PolicyFile, f.Policies())
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if !reflect.DeepEqual(f.Tree(), want) {
			t.Errorf("%s: trees_gen.go is not %s's tree: run `make generate` (go generate ./functions/handlers)", f.Name, f.PolicyFile)
		}
		onDisk, err := os.ReadFile(filepath.Join("policies", f.Name+".yaml"))
		if err != nil || string(onDisk) != string(f.Policies()) {
			t.Errorf("%s: the embedded file is not policies/%s.yaml (%v)", f.Name, f.Name, err)
		}
		a, errA := policy.Parse(f.PolicyFile, f.Policies())
		b, errB := policy.ParseTree(f.PolicyFile, f.Tree())
		if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("%s: Parse and ParseTree of the compiled tree differ (%v, %v)", f.Name, errA, errB)
		}
	}
}
