package e2e

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/policy"
)

// coldStarts is how many cold starts TestColdStart measures per function.
const coldStarts = 5

// MaxBootstrapSize is the size every deployed (linux/arm64) bootstrap must
// stay under: the target.
const MaxBootstrapSize = 10_000_000

// coldEnv is an environment in which fn's init succeeds without a network
// call (FromEnv makes none): a table name, a DynamoDB endpoint where nothing
// listens, and a key ring.
func coldEnv(t *testing.T, fn handlers.Function) map[string]string {
	pf, err := policy.Parse(fn.PolicyFile, fn.Policies())
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, p := range pf.Policies {
		switch p.StrategyName() {
		case "durable", "kv", "inflight":
			env["EDGELIMIT_TABLE"] = "edgelimit"
			env["EDGELIMIT_DYNAMODB_ENDPOINT"] = closedEndpoint(t)
		case "signed":
			env["EDGELIMIT_SECRETS"] = "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
		}
	}
	return env
}

// TestColdStart measures every function's cold start under the emulator:
// the bootstrap's size and the init duration (from starting the process to
// its first request for work), the median of coldStarts fresh starts. It
// asserts the size budget of the deployed linux/arm64 bootstraps only:
// durations depend on the machine and are reported, never asserted. With
// EDGELIMIT_COLDSTART_REPORT set it writes the Markdown table of
// docs/deploy.md there.
//
// With EDGELIMIT_COLDSTART_BASELINE set to another checkout of the
// repository (an older commit, in a git worktree), its functions are built
// (with EDGELIMIT_COLDSTART_BASELINE_TAGS, default lambda.norpc: the tags
// of make build before nethttpomithttp2) and measured in the same run:
// each function's baseline starts just before this tree's, so the two
// columns share the machine's load.
// baselineTags are the build tags of the baseline checkout's functions.
var baselineTags = cmp.Or(os.Getenv("EDGELIMIT_COLDSTART_BASELINE_TAGS"), "lambda.norpc")

func TestColdStart(t *testing.T) {
	type row struct {
		name              string
		size, arm64Size   int64
		median, low, high float64
		missing           string
		base              float64 // the baseline's median, ms (0: none)
		baseSize          int64
	}
	var rows []row
	var baseline map[string]string
	if dir := os.Getenv("EDGELIMIT_COLDSTART_BASELINE"); dir != "" {
		var err error
		if baseline, err = buildTree(dir, runtime.GOARCH, t.TempDir(), baselineTags); err != nil {
			t.Fatalf("build the baseline %s: %v", dir, err)
		}
	}
	for _, fn := range handlers.All() {
		r := row{name: fn.Name}
		if old, ok := baseline[fn.Name]; ok {
			r.base = measureColdStarts(t, fn.Name, old, coldEnv(t, fn))
			if st, err := os.Stat(old); err == nil {
				r.baseSize = st.Size()
			}
		}
		st, err := os.Stat(bootstrap(t, fn.Name))
		if err != nil {
			t.Fatal(err)
		}
		r.size = st.Size()
		arm64, err := buildFunctions("arm64")
		if err != nil {
			t.Fatalf("build the functions for linux/arm64: %v", err)
		}
		st, err = os.Stat(arm64[fn.Name])
		if err != nil {
			t.Fatal(err)
		}
		r.arm64Size = st.Size()
		if r.arm64Size >= MaxBootstrapSize {
			t.Errorf("functions/%s: the linux/arm64 bootstrap is %d bytes, over the %d budget", fn.Name, r.arm64Size, MaxBootstrapSize)
		}
		env := coldEnv(t, fn)
		var inits []float64
		for i := range coldStarts {
			e := startEmulator(t, fn.Name, env)
			// A path no policy guards: the handler answers without a store call.
			ev := sampleEvent(t, "GET", "/cold-start", "192.0.2.1", nil, "")
			ev.RequestContext.RequestID = fmt.Sprintf("cold-%d", i)
			payload := mustJSON(t, ev)
			status, body := e.post(t, payload, ev.RequestContext.RequestID)
			if failed(status, body) {
				msg := e.initError()
				if !missingPieces.MatchString(msg) {
					t.Fatalf("functions/%s: cold start failed: status %d %s\n%s", fn.Name, status, body, e.output())
				}
				r.missing = msg
				e.stop()
				break
			}
			inits = append(inits, e.initDuration(t))
			e.stop()
		}
		if len(inits) > 0 {
			slices.Sort(inits)
			r.median, r.low, r.high = inits[len(inits)/2], inits[0], inits[len(inits)-1]
		}
		rows = append(rows, r)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "| function | bootstrap linux/arm64 | bootstrap %s/%s | init, median of %d (min-max) |", runtime.GOOS, runtime.GOARCH, coldStarts)
	if baseline != nil {
		b.WriteString(" baseline bootstrap | baseline init, median |")
	}
	b.WriteString("\n|---|---:|---:|---:|")
	if baseline != nil {
		b.WriteString("---:|---:|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		arm := mb(r.arm64Size)
		init := fmt.Sprintf("%.1f ms (%.1f-%.1f)", r.median, r.low, r.high)
		if r.missing != "" {
			init = "cannot start yet: " + r.missing
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |", r.name, arm, mb(r.size), init)
		if baseline != nil {
			fmt.Fprintf(&b, " %s | %.1f ms |", mb(r.baseSize), r.base)
		}
		b.WriteString("\n")
	}
	t.Logf("cold starts under the Lambda Runtime Interface Emulator (%d CPUs):\n%s", runtime.NumCPU(), b.String())
	if out := os.Getenv("EDGELIMIT_COLDSTART_REPORT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mb(n int64) string { return fmt.Sprintf("%.2f MB", float64(n)/1e6) }

// measureColdStarts returns the median init duration, in milliseconds, of
// coldStarts fresh starts of the bootstrap at boot.
func measureColdStarts(t *testing.T, name, boot string, env map[string]string) float64 {
	t.Helper()
	var inits []float64
	for i := range coldStarts {
		e := startEmulatorOf(t, name, boot, env)
		ev := sampleEvent(t, "GET", "/cold-start", "192.0.2.1", nil, "")
		ev.RequestContext.RequestID = fmt.Sprintf("base-%d", i)
		status, body := e.post(t, mustJSON(t, ev), ev.RequestContext.RequestID)
		if failed(status, body) {
			t.Logf("baseline %s: cold start failed: %d %s", name, status, body)
			e.stop()
			return 0
		}
		inits = append(inits, e.initDuration(t))
		e.stop()
	}
	slices.Sort(inits)
	return inits[len(inits)/2]
}
