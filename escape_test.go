package edgelimit_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDecideScratchStaysOnTheStack asks the compiler's escape analysis
// (go build -gcflags=-m) whether Engine.Decide's per-request slots stay on
// the stack, the premise of its allocation count. Regression: a closure
// handed to addDecisionFields moved them to the heap, 4.9 KB and one
// allocation on every request (BenchmarkHandler/1-policy: 6,232 B/op and 4
// allocs, 1,368 B/op and 3 allocs once fixed). It checks the compiler's
// word, not a timing or an allocation count, so -race does not change it.
func TestDecideScratchStaysOnTheStack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package")
	}
	cmd := exec.Command("go", "build", "-gcflags=-m", "-o", os.DevNull, ".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "engine.go:") && strings.Contains(line, "moved to heap: bufs") {
			t.Errorf("Engine.Decide's slots escape: %s", line)
		}
	}
	if !strings.Contains(string(out), "engine.go:") {
		t.Fatalf("no escape-analysis output for engine.go; did the flags change?\n%.2000s", out)
	}
}
