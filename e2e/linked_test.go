package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// contactReplacement is functions/handlers/policies/contact.yaml in JSON (what a
// replacement file, EDGELIMIT_POLICY_FILE, is written in for a function),
// with login-failures' fields less what each case sets.
const contactReplacement = `{"version": 1, "policies": [
  {"name": "contact", "routes": ["POST /contact"], "key": "ip", "strategy": "kv", "limit": 5, "window": "1m", "on_store_error": "allow"},
  {"name": "login-failures", "routes": ["POST /login"], "key": "ip", "strategy": "durable", "limit": 5, "window": "15m",
   "charge_status": [401, 403], "on_store_error": "deny"%s}
]}`

// TestContactFunctionRefusesWhatItDoesNotLink: each example function links
// only the parts of the durable strategy its own policy file uses (contact:
// the fixed window, no override or ban store, no in-process twin, no
// proof-of-work gate; see docs/deploy.md). A replacement policy file or an
// EDGELIMIT_OVERRIDES that asks for another part does not start: the init
// fails with an error that names the policy and what it asks for. The
// same file with the algorithm it links starts and serves.
func TestContactFunctionRefusesWhatItDoesNotLink(t *testing.T) {
	cases := []struct {
		name, fields, overrides string
		want                    []string
	}{
		{name: "linked", fields: `, "algorithm": "fixed-window"`},
		{name: "algorithm", fields: `, "algorithm": "gcra"`,
			want: []string{"login-failures", "algorithm gcra is not linked", "GCRACode"}},
		{name: "sliding-log", fields: `, "algorithm": "sliding-log"`,
			want: []string{"login-failures", "algorithm sliding-log is not linked", "SlidingLogCode"}},
		{name: "proof_of_work", fields: `, "proof_of_work": {"above": 3, "bits": 16}`,
			want: []string{"login-failures", "proof_of_work", "edgelimit.nopowgate"}},
		{name: "overrides", fields: `, "overrides": true`,
			want: []string{"login-failures", "overrides: true", "keeps no overrides"}},
		{name: "ban", fields: `, "ban": {"after": 20, "within": "1h", "for": "15m"}`,
			want: []string{"login-failures", "has a ban", "keeps no bans"}},
		{name: "local", overrides: "login-failures.on_store_error=local",
			want: []string{"login-failures", "on_store_error: local", "MemoryCode"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "contact.json")
			if err := os.WriteFile(file, []byte(strings.Replace(contactReplacement, "%s", c.fields, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"EDGELIMIT_TABLE": "edgelimit", "EDGELIMIT_DYNAMODB_ENDPOINT": closedEndpoint(t),
				"EDGELIMIT_POLICY_FILE": file}
			if c.overrides != "" {
				env["EDGELIMIT_OVERRIDES"] = c.overrides
			}
			e := startEmulator(t, "contact", env)
			status, body := e.post(t, mustJSON(t, sampleEvent(t, "GET", "/", "203.0.113.7", nil, "")), "contact-linked-1")
			e.stop()
			msg := e.initError()
			if c.want == nil {
				if msg != "" || failed(status, body) {
					t.Fatalf("the function did not start with its own algorithm: init error %q, status %d, body %s", msg, status, body)
				}
				return
			}
			if !failed(status, body) {
				t.Fatalf("the function started: status %d, body %s", status, body)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("init error %q does not say %q\noutput:\n%s", msg, w, e.output())
				}
			}
		})
	}
}

// TestFunctionsLinkOnlyWhatTheirPoliciesUse: built as make builds them but
// keeping the symbol table, each example function links the durable
// algorithms, stores and gates its policy file uses and none of the others
// (functions/<name>/main.go names them; docs/deploy.md): paid fixed-window
// and gcra with the override and ban stores, contact and tts fixed-window,
// search gcra with the Memory store of its in-process twin; none links
// powgate's gate or, but for tts's signed policy, package pow.
func TestFunctionsLinkOnlyWhatTheirPoliciesUse(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const dc = "github.com/edgelimit/edgelimit/durablecounter."
	parts := map[string]string{
		"fixed-window":   dc + "(*fixedWindow).fits",
		"sliding-window": dc + "(*slidingWindow).fits",
		"sliding-log":    dc + "(*slidingLog).fits",
		"gcra":           dc + "(*gcra).fits",
		"memory":         dc + "(*Memory).apply",
		"bans":           "github.com/edgelimit/edgelimit/bans/dynamostore.(*Store).",
		"overrides":      "github.com/edgelimit/edgelimit/overrides/dynamostore.(*Store).",
		"powgate":        "github.com/edgelimit/edgelimit/powgate.(*Gate).Allow",
		"pow":            "github.com/edgelimit/edgelimit/pow.(*Challenger).VerifyAt",
	}
	want := map[string][]string{
		"paid":    {"fixed-window", "gcra", "bans", "overrides"},
		"contact": {"fixed-window"},
		"search":  {"gcra", "memory"},
		"tts":     {"fixed-window", "pow"},
	}
	out := t.TempDir()
	args := []string{"build", "-tags", lambdaTags, "-trimpath", "-o", out + "/"}
	for f := range want {
		args = append(args, "./functions/"+f)
	}
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	for f, linked := range want {
		nm, err := exec.Command(goTool(), "tool", "nm", filepath.Join(out, f)).Output()
		if err != nil {
			t.Fatalf("go tool nm %s: %v", f, err)
		}
		for part, sym := range parts {
			has := strings.Contains(string(nm), " "+sym)
			if want := slices.Contains(linked, part); has != want {
				t.Errorf("functions/%s: links %s (%s) %v, want %v", f, part, sym, has, want)
			}
		}
	}
}
