package edgelimit_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPerRequestPathStaysOnTheStack asks the compiler's escape analysis
// (go build -gcflags=-m) whether the per-request path keeps its locals on
// the stack, the premise of its allocation count (one allocation of the
// request's own memory in Engine.Decide, reqMem; the rest reused or on
// the stack): no local of the engine's request files, of the key hashes
// (the HMAC's output, SipHash's flat buffer), of the net/http adapter
// (its Input) or of the in-process stores' decisions (durablecounter's
// Memory and its inline keys, kvbucket's cache and its table) moves to
// the heap. A slice grown by append on every request is not a local that
// moves, and the compiler does not report it: middleware's TestSteadyStateAllocations
// counts those. Regression: a closure handed to
// addDecisionFields moved Engine.Decide's slots to the heap, 4.9 KB and
// one allocation on every request (BenchmarkHandler/1-policy: 6,232 B/op
// and 4 allocs, 1,368 B/op and 3 allocs once fixed). It checks the
// compiler's word, not a timing or an allocation count, so -race does not
// change it.
func TestPerRequestPathStaysOnTheStack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the packages")
	}
	cmd := exec.Command("go", "build", "-gcflags=-m", "-o", os.DevNull,
		".", "./internal/keyhash", "./middleware", "./durablecounter", "./kvbucket")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	files := []string{
		"./engine.go:", "./routeset.go:", "./evaluate.go:", "./keys.go:", "./verdict.go:", "./context.go:", "./budget.go:", "./render.go:", "./headers.go:",
		"durablecounter/memory.go:", "durablecounter/decide.go:", "kvbucket/cache.go:", "kvbucket/table.go:",
		"internal/keyhash/keyhash.go:", "internal/keyhash/siphash.go:",
		"middleware/http.go:", "middleware/input.go:", "middleware/headers.go:",
	}
	// Allowed: once per Handler (its options), a problem extension's
	// members (a denial with an extension, parsed by encoding/json), the
	// items of a batch of two or more policies (handed to the store's
	// AllowBatch, an interface call), the KV key of a kv cache entry
	// whose key is longer than 24 bytes, made once with the entry (which
	// is allocated then too), never on a request the cache holds, and the
	// copy of the route sets' map made once per new route set.
	allowed := []string{"middleware/http.go", "moved to heap: o", "render.go", "moved to heap: raw", "evaluate.go", "moved to heap: buf",
		"kvbucket/cache.go", "moved to heap: long", "routeset.go", "grown"}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range files {
			if !strings.Contains(line, f) {
				continue
			}
			seen[f] = true
			if !strings.Contains(line, "moved to heap:") {
				continue
			}
			ok := false
			for i := 0; i < len(allowed); i += 2 {
				ok = ok || strings.Contains(line, allowed[i]) && strings.Contains(line, allowed[i+1])
			}
			if !ok {
				t.Errorf("a per-request local escapes: %s", line)
			}
		}
	}
	for _, f := range []string{"./engine.go:", "./evaluate.go:", "./render.go:", "internal/keyhash/keyhash.go:", "middleware/http.go:", "durablecounter/memory.go:", "kvbucket/cache.go:", "kvbucket/table.go:"} {
		if !seen[f] {
			t.Errorf("no escape-analysis output for %s; did the flags or the file names change?\n%.2000s", f, out)
		}
	}
	if !strings.Contains(string(out), "engine.go") || !strings.Contains(string(out), "new(reqMem) escapes to heap") {
		t.Errorf("the request's memory is no longer one new(reqMem) in Engine.Decide; update this test's premise\n%.3000s", out)
	}
}
