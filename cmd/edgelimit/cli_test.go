package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/edgelimit/edgelimit/setup"
)

// TestExitCodes: every subcommand exits 0 for the help it was asked for
// (on stdout), 2 for a command line it cannot run (one line saying why,
// one saying where the usage is, on stderr).
//
// Regression: `usage -h` exited 0 but `override set -h` and `serve -h` 2,
// and a flag after a URL printed only the usage text.
func TestExitCodes(t *testing.T) {
	t.Setenv(setup.EnvHashKey, "")
	for _, cmd := range [][]string{{"serve"}, {"check"}, {"get"}, {"solve"}, {"keygen"}, {"create-table"},
		{"usage"}, {"reset"}, {"grant"}, {"override", "set"}, {"override", "get"}, {"override", "delete"}, {"top"}} {
		name := strings.Join(cmd, " ")
		t.Run(name, func(t *testing.T) {
			for _, help := range []string{"-h", "--help"} {
				code, out, errs := cli(append(cmd, help)...)
				if code != 0 || errs != "" || !strings.Contains(strings.ToLower(out), "usage") {
					t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", name, help, code, out, errs)
				}
			}
			code, out, errs := cli(append(cmd, "--no-such-flag")...)
			if want := "edgelimit " + name + ": flag provided but not defined: -no-such-flag\nRun 'edgelimit " + cmd[0] + " -h' for its usage.\n"; code != 2 || out != "" || errs != want {
				t.Errorf("%s --no-such-flag: exit %d, stdout %q, stderr %q; want 2 and %q", name, code, out, errs, want)
			}
			if cmd[0] == "top" {
				return // its arguments are files, as many as given: TestTopErrors
			}
			wrong := append(cmd, "a", "b", "c", "d")
			if code, _, errs := cli(wrong...); code != 2 || strings.Count(errs, "\n") != 2 {
				t.Errorf("%s with 4 arguments: exit %d, stderr %q; want 2 and two lines", name, code, errs)
			}
		})
	}
	if code, out, _ := cli("-h"); code != 0 || !strings.Contains(out, "Usage:") {
		t.Errorf("edgelimit -h: exit %d, stdout %q", code, out)
	}
	if code, _, errs := cli(); code != 2 || !strings.Contains(errs, "Usage:") {
		t.Errorf("edgelimit alone: exit %d, stderr %q", code, errs)
	}
}

// TestFlagsAfterArguments: flags may follow the arguments, as in
// `get URL -o FILE` (regression: it printed only the usage text), and
// get -v prints each response's status line.
func TestFlagsAfterArguments(t *testing.T) {
	url := startServe(t, "--policies", writePolicies(t, signedPolicies))
	out := filepath.Join(t.TempDir(), "hello.wav")
	code, stdout, stderr := cli("get", url+"/tts", "-X", "POST", "-H", "Content-Type: application/json", "-d", `{"text":"hello"}`, "-o", out, "-v")
	if code != 0 || stdout != "" {
		t.Fatalf("get URL -o FILE -v: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	if b, err := os.ReadFile(out); err != nil || !strings.HasPrefix(string(b), "RIFF") {
		t.Errorf("get URL -o FILE wrote %.4q (%v), want a WAV file", b, err)
	}
	// The client answers the challenge's 429 itself; what it returns is
	// the 200 that the proof bought.
	want := "* challenge: 8 bits, solving\n* solved in "
	if !strings.HasPrefix(stderr, want) || !strings.HasSuffix(stderr, "* kept a new Edgelimit-Token\n< HTTP/1.1 200 OK\n") {
		t.Errorf("get -v printed:\n%s\nwant the challenge, the proof, the token and the status line", stderr)
	}
	// The words after -- are arguments, whatever they look like.
	if code, _, stderr := cli("solve", "--", "-v"); code != 1 || !strings.HasPrefix(stderr, "edgelimit solve: ") {
		t.Errorf("solve -- -v: exit %d, stderr %q; want 1 (a challenge that does not parse)", code, stderr)
	}
}

// TestCheckReadsWhatServeReads: check refuses every file serve refuses at
// start-up, with the same words: a list file that is missing or has a bad
// line (named by the list file and its line), a list variable with a bad
// value (named by the variable and the value's position).
//
// Regression: check printed "1 policy OK" and exited 0 for all of them; it
// never read list files or variables.
func TestCheckReadsWhatServeReads(t *testing.T) {
	t.Setenv(setup.EnvHashKey, "")
	const head = "version: 1\nlists:\n  - name: blocked\n    action: deny\n"
	const pol = "policies:\n  - {name: x, routes: [\"GET /x\"], key: ip, strategy: durable, limit: 1, window: 1m}\n"
	for _, tc := range []struct {
		name, policies, list, env, want string
	}{
		{"missing list file", head + "    file: blocked.txt\n" + pol, "", "",
			`policies.yaml:3: list "blocked": open DIR/blocked.txt: no such file or directory`},
		{"not an address", head + "    file: blocked.txt\n" + pol, "10.0.0.0/8\n# abusers\n\nnot-a-cidr\n", "",
			`DIR/blocked.txt:4: list "blocked": "not-a-cidr" is not an address or a CIDR, like 192.0.2.1 or 10.0.0.0/8`},
		{"a bad CIDR", head + "    file: blocked.txt\n" + pol, "10.0.0.0/8\n192.0.2.1\n\n192.0.2.300/24\n", "",
			`DIR/blocked.txt:4: list "blocked": "192.0.2.300/24" is not a CIDR, like 10.0.0.0/8 or 2001:db8::/32`},
		{"a bad value in a variable", head + "    env: H2BAD\n" + pol, "", "10.0.0.0/8, 300.0.0.0/8",
			`policies.yaml:3: list "blocked": environment variable H2BAD, value 2: "300.0.0.0/8" is not a CIDR, like 10.0.0.0/8 or 2001:db8::/32`},
		{"proof of work without a key ring", "version: 1\npolicies:\n  - {name: g, routes: [\"GET /g\"], key: ip, strategy: durable, limit: 10, window: 1m, proof_of_work: {above: 5, bits: 8}}\n", "", "",
			"setup: bad environment: EDGELIMIT_SECRETS is not set; policies g ask for proof of work above a threshold, and its challenges are keyed by that key ring (kid:base64 entries, newest first)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("H2BAD", tc.env)
			t.Setenv(setup.EnvSecrets, "")
			file := writePolicies(t, tc.policies)
			dir := filepath.Dir(file)
			if tc.list != "" {
				if err := os.WriteFile(filepath.Join(dir, "blocked.txt"), []byte(tc.list), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			want = strings.ReplaceAll(want, "policies.yaml:", file+":")
			code, out, errs := cli("check", file)
			if code != 1 || out != "" || errs != want+"\n" {
				t.Errorf("check: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, out, errs, want)
			}
			code, _, errs = cli("serve", "--addr", "127.0.0.1:0", "--policies", file)
			if code != 1 || !strings.HasSuffix(errs, "edgelimit serve: "+want+"\n") {
				t.Errorf("serve: exit %d, stderr:\n%s\nwant exit 1 ending:\nedgelimit serve: %s", code, errs, want)
			}
		})
	}
}

// TestDynamoErrorsAreOneLine: what the SDK reports becomes one line that
// names the table, the server and the fix, never the SDK's dump. The
// errors are built as the SDK builds them; TestOperatorErrors gets the
// same lines from real servers.
func TestDynamoErrorsAreOneLine(t *testing.T) {
	op := func(name string, err error) error {
		return fmt.Errorf("durablecounter: get: %w", &smithy.OperationError{ServiceID: "DynamoDB", OperationName: name, Err: err})
	}
	at := storeAt{table: "edgelimit-prod", region: "eu-west-1"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"not found", op("GetItem", &types.ResourceNotFoundException{Message: ptr("Requested resource not found")}),
			`table "edgelimit-prod" does not exist at AWS (eu-west-1); FIX`},
		{"access denied", op("UpdateItem", &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "User: arn:aws:sts::1:assumed-role/ops is not authorized to perform: dynamodb:UpdateItem"}),
			`DynamoDB at AWS (eu-west-1) refused UpdateItem on table "edgelimit-prod" (AccessDeniedException: User: arn:aws:sts::1:assumed-role/ops is not authorized to perform: dynamodb:UpdateItem); the role needs dynamodb:UpdateItem on the table (docs/operations.md lists what each command calls)`},
		{"bad credentials", op("GetItem", &smithy.GenericAPIError{Code: "UnrecognizedClientException", Message: "The security token included in the request is invalid."}),
			`DynamoDB at AWS (eu-west-1) refused the credentials (UnrecognizedClientException: The security token included in the request is invalid.); configure valid ones (aws configure, AWS_PROFILE)`},
		{"throttled", op("GetItem", &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "slow down"}),
			`DynamoDB at AWS (eu-west-1): GetItem on table "edgelimit-prod": ProvisionedThroughputExceededException: slow down`},
		{"deadline", op("GetItem", context.DeadlineExceeded),
			`cannot reach DynamoDB at AWS (eu-west-1): context deadline exceeded; check the network, and AWS_REGION (or EDGELIMIT_DYNAMODB_ENDPOINT for a local server)`},
		{"not from DynamoDB", errors.New(`policy "x" has no tiers`), `policy "x" has no tiers`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := dynamoError(tc.err, at, "FIX").Error()
			if got != tc.want {
				t.Errorf("dynamoError =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestOperatorErrors: the operator's commands fail in one line naming the
// table, the server and the fix, as serve does, with exit 1.
//
// Regression: `usage --table nope` printed the SDK's "operation error
// DynamoDB: GetItem, https response error StatusCode: 400, RequestID: ...,
// ResourceNotFoundException" without the table's name, and an unreachable
// endpoint "exceeded maximum number of attempts, 4 ...".
func TestOperatorErrors(t *testing.T) {
	quotaEnv(t)
	endpoint := os.Getenv(setup.EnvEndpoint)
	t.Setenv(setup.EnvPolicyFile, writePolicies(t, quotaPolicies))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no such table", []string{"usage", "--table", "nope-nope", "api-daily", "key-acme"},
			`edgelimit usage: table "nope-nope" does not exist at ` + endpoint + `; check --table (default EDGELIMIT_TABLE): it must be the functions' table, the stack's TableName`},
		{"no such table, grant", []string{"grant", "api-daily", "key-acme", "5", "--table", "nope-nope"},
			`edgelimit grant: table "nope-nope" does not exist at ` + endpoint + `; check --table (default EDGELIMIT_TABLE): it must be the functions' table, the stack's TableName`},
		{"unreachable", []string{"override", "set", "--limit", "5", "--dynamodb-endpoint", "http://127.0.0.1:1", "api-daily", "key-acme"},
			`edgelimit override: cannot reach DynamoDB at http://127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused; is the server running? (--dynamodb-endpoint, default EDGELIMIT_DYNAMODB_ENDPOINT)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := cli(tc.args...)
			if code != 1 || out != "" || errs != tc.want+"\n" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, out, errs, tc.want)
			}
		})
	}
}

// TestOverrideBlock: `override set --limit 0` blocks a key: every strategy
// that honours overrides answers its requests 429 (its grant is not spent
// either), other keys are untouched, and `override delete` lifts it.
func TestOverrideBlock(t *testing.T) {
	quotaEnv(t)
	awayFromDayBoundary(t)
	t.Setenv(setup.EnvPolicyFile, writePolicies(t, `version: 1
policies:
  - {name: api-daily, routes: ["GET /api/*"], key: header:X-Api-Key, strategy: durable, limit: 100, window: 24h, store_timeout: 5s, overrides: true, override_staleness: 1s}
  - {name: api-gcra, routes: ["GET /gcra"], key: header:X-Api-Key, strategy: durable, algorithm: gcra, limit: 10, window: 1s, burst: 20, store_timeout: 5s, overrides: true, override_staleness: 1s}
  - {name: api-kv, routes: ["GET /kv"], key: header:X-Api-Key, strategy: kv, limit: 100, window: 1m, store_timeout: 5s, overrides: true, override_staleness: 1s}
  - {name: api-jobs, routes: ["GET /jobs"], key: header:X-Api-Key, strategy: inflight, limit: 2, window: 1m, store_timeout: 5s, overrides: true, override_staleness: 1s}
`))
	c := &apiClient{t: t, url: startServe(t, "--store", "dynamodb", "--create-table")}
	for _, tc := range []struct{ policy, path string }{{"api-daily", "/api/report"}, {"api-gcra", "/gcra"}, {"api-kv", "/kv"}, {"api-jobs", "/jobs"}} {
		t.Run(tc.policy, func(t *testing.T) {
			c.t = t
			if status, _, _ := c.get(tc.path, "key-spam", ""); status != 200 {
				t.Fatalf("before the block: %d", status)
			}
			if strings.HasPrefix(tc.policy, "api-daily") || tc.policy == "api-gcra" { // a grant the block must not let through
				mustCLI(t, "grant", tc.policy, "key-spam", "50", "--for", "1h")
			}
			out := mustCLI(t, "override", "set", tc.policy, "key-spam", "--limit", "0")
			if want := "policy " + tc.policy + ": override block (every request refused) set until removed; every instance applies it within the policy's override_staleness (1s)\n"; out != want {
				t.Errorf("override set --limit 0 printed %q, want %q", out, want)
			}
			c.afterStaleness()
			for i := range 3 {
				status, rp, rl := c.get(tc.path, "key-spam", "")
				if status != 429 || !strings.HasPrefix(rl, `"`+tc.policy+`";r=0;`) {
					t.Errorf("blocked, request %d: %d, RateLimit-Policy %s, RateLimit %s; want 429, r=0", i+1, status, rp, rl)
				}
			}
			if status, _, _ := c.get(tc.path, "key-other", ""); status != 200 {
				t.Errorf("another key while key-spam is blocked: %d, want 200", status)
			}
			if u := usageOf(t, tc.policy, "key-spam"); u.Limit != 0 || u.Remaining != 0 || u.Allowed || u.Override["block"] != true {
				t.Errorf("usage of the blocked key = %+v, want limit 0, nothing left, the block shown", u)
			}
			mustCLI(t, "override", "delete", tc.policy, "key-spam")
			c.afterStaleness()
			if status, _, _ := c.get(tc.path, "key-spam", ""); status != 200 {
				t.Errorf("after override delete: %d, want 200", status)
			}
		})
	}
}

// TestGrantSaysUntil: a grant without --for or --until lasts until the
// current window ends, and says when, in the text and the JSON.
//
// Regression: --json printed "until":null.
func TestGrantSaysUntil(t *testing.T) {
	quotaEnv(t)
	awayFromDayBoundary(t)
	t.Setenv(setup.EnvPolicyFile, writePolicies(t, quotaPolicies))
	mustCLI(t, "create-table")
	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour).Format(time.RFC3339)
	if out := mustCLI(t, "grant", "api-daily", "key-acme", "5"); out != "policy api-daily: granted 5 units until "+midnight+" (the end of the current window)\n" {
		t.Errorf("grant printed %q, want the end of the day, %s", out, midnight)
	}
	if out := mustCLI(t, "grant", "--json", "api-daily", "key-acme", "5"); out != `{"granted":5,"policy":"api-daily","until":"`+midnight+`"}`+"\n" {
		t.Errorf("grant --json printed %q, want until %s", out, midnight)
	}
	in := time.Now().Add(90 * time.Minute)
	out := mustCLI(t, "grant", "--json", "api-daily", "key-acme", "5", "--for", "90m")
	var got struct{ Until time.Time }
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Until.Before(in) || got.Until.After(in.Add(5*time.Second)) {
		t.Errorf("grant --for 90m --json printed %q (%v); want an end 90 minutes from now", out, err)
	}
}
