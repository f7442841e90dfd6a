package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestLLMExampleSettlesTwoCounters runs examples/llm (docs/shaping.md,
// "Several counters per request") under the runtime emulator on dynalite:
// each request reserves its prompt's tokens and its max_tokens before the
// handler, and is settled with what it generated; the headers show each
// counter as it was before the request's reservation, so the next
// response shows the settlement. A body the handler refuses (400) costs
// nothing; a request whose reservation does not fit is refused, though
// the tokens it would have used would have fitted.
func TestLLMExampleSettlesTwoCounters(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the emulator runs linux programs")
	}
	endpoint, table := dynalite(t)
	out := t.TempDir()
	build := exec.Command(goTool(), "build", "-tags", programTags, "-trimpath", "-o", filepath.Join(out, "bootstrap"), "./examples/llm")
	build.Dir = root(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build examples/llm: %v\n%s", err, b)
	}
	e := startEmulatorOf(t, "llm", filepath.Join(out, "bootstrap"), map[string]string{
		"EDGELIMIT_TABLE": table, "EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		// Windows no test run crosses (the count is the test's, not the
		// clock's), and a store budget a loaded machine cannot miss.
		"EDGELIMIT_OVERRIDES": "input-tokens.window=" + longWindow + ",output-tokens.window=" + longWindow +
			",input-tokens.store_timeout=" + testBudget + ",output-tokens.store_timeout=" + testBudget,
	})
	key := "llm-" + randomID(t)
	ask := func(body string) events.APIGatewayV2HTTPResponse {
		ev := sampleEvent(t, "POST", "/generate", "192.0.2.30", map[string]string{"x-api-key": key, "content-type": "application/json"}, body)
		resp, _ := e.invoke(t, ev)
		return resp
	}
	prompt := func(words, maxTokens int) string {
		b, _ := json.Marshal(map[string]any{"prompt": strings.Repeat("word ", words), "max_tokens": maxTokens})
		return string(b)
	}
	for i, st := range []struct {
		body      string
		status    int
		tokens    string // X-Tokens
		rIn, rOut int    // RateLimit's r of each, before the request's reservation
		violated  string
	}{
		{prompt(4, 100), 200, "4 in, 8 out", 10000, 2000, ""},
		{"{", 400, "", 9996, 1992, ""},                               // reserved 1 and 256, all given back
		{prompt(4, 100), 200, "4 in, 8 out", 9996, 1992, ""},         // the 400 cost nothing
		{prompt(500, 1000), 200, "500 in, 1000 out", 9992, 1984, ""}, // reserved 1000 of 1984
		{prompt(500, 1000), 429, "", 9492, 984, "output-tokens"},     // 1000 does not fit 984
		{prompt(4, 100), 200, "4 in, 8 out", 9492, 984, ""},          // 100 does
		{prompt(4, 100), 200, "4 in, 8 out", 9488, 976, ""},          // settled at 8
	} {
		resp := ask(st.body)
		rl := header(resp, "RateLimit")
		t.Logf("request %d: %d X-Tokens %q RateLimit %s", i+1, resp.StatusCode, header(resp, "X-Tokens"), rl)
		if resp.StatusCode != st.status {
			t.Fatalf("request %d: status %d, want %d; body %s\n%s", i+1, resp.StatusCode, st.status, resp.Body, e.stderr)
		}
		if st.tokens != "" && header(resp, "X-Tokens") != st.tokens {
			t.Errorf("request %d: X-Tokens %q, want %q", i+1, header(resp, "X-Tokens"), st.tokens)
		}
		for _, want := range []string{`"input-tokens";r=` + strconv.Itoa(st.rIn) + ";", `"output-tokens";r=` + strconv.Itoa(st.rOut) + ";"} {
			if st.violated == "" && !strings.Contains(rl, want) {
				t.Errorf("request %d: RateLimit %q, want %s", i+1, rl, want)
			}
		}
		if st.violated != "" {
			p := wantProblem(t, "reservation does not fit", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
			if len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != st.violated {
				t.Errorf("request %d: violated %v, want [%s]", i+1, p.ViolatedPolicies, st.violated)
			}
		}
	}
}
