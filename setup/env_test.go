package setup_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/dynamodb/kv"
	"github.com/edgelimit/edgelimit/setup/memory"
	"github.com/edgelimit/edgelimit/setup/signed"
)

const durableFile = `version: 1
policies:
  - name: daily
    routes: ["GET /paid/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 1000
    window: 24h
  - name: burst
    routes: ["GET /paid/*"]
    key: header:X-Api-Key
    strategy: durable
    algorithm: fixed-window
    limit: 10
    window: 1s
    on_store_error: allow
`

const signedFile = "version: 1\npolicies:\n  - {name: s, routes: [\"POST /tts\"], key: ip, strategy: signed, limit: 1, window: 1m}\n"

var testKey = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))

// allBackends are what the example functions use, together.
var allBackends = []setup.Backend{durable.Backend(dynamodb.Config{}), kv.Backend(dynamodb.Config{}), signed.Backend()}

// env returns a Getenv over vars plus a working baseline.
func env(vars map[string]string) func(string) string {
	base := map[string]string{
		setup.EnvHashKey: testKey,
		setup.EnvTable:   "edgelimit",
		// No AWS here: TestFromEnvWarmsTheStoreUp warms a local server.
		setup.EnvStoreWarmUp: "off",
		"AWS_REGION":         "eu-west-1",
		"AWS_ACCESS_KEY_ID":  "AKIDEXAMPLE",
		// The secret is never logged; the test checks that below.
		"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
	}
	for k, v := range vars {
		base[k] = v
	}
	return func(k string) string { return base[k] }
}

func fromEnv(t *testing.T, vars map[string]string, policies string) (*setup.Env, *bytes.Buffer, *bytes.Buffer, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e, err := setup.FromEnv(context.Background(), setup.EnvConfig{
		Backends:   allBackends,
		Policies:   []byte(policies),
		PolicyFile: "test.yaml",
		Function:   "paid",
		Getenv:     env(vars),
		Stdout:     &stdout,
		Stderr:     &stderr,
		Now:        func() time.Time { return time.Unix(1_700_000_000, 0) },
	})
	return e, &stdout, &stderr, err
}

func TestFromEnvRejectsBadEnvironments(t *testing.T) {
	tests := []struct {
		name     string
		vars     map[string]string
		policies string
		want     string // in the error
	}{
		{"no hash key", map[string]string{setup.EnvHashKey: ""}, durableFile, "EDGELIMIT_HASH_KEY is not set"},
		{"hash key not base64", map[string]string{setup.EnvHashKey: "not base64!"}, durableFile, "EDGELIMIT_HASH_KEY is not standard base64"},
		{"hash key too short", map[string]string{setup.EnvHashKey: base64.StdEncoding.EncodeToString([]byte("short"))}, durableFile, "decodes to 5 bytes"},
		{"no table for durable policies", map[string]string{setup.EnvTable: ""}, durableFile, "EDGELIMIT_TABLE is not set; policies daily, burst"},
		{"no region", map[string]string{"AWS_REGION": ""}, durableFile, "AWS_REGION is not set"},
		{"no credentials", map[string]string{"AWS_ACCESS_KEY_ID": ""}, durableFile, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set"},
		{"bad log level", map[string]string{setup.EnvLogLevel: "loud"}, durableFile, "EDGELIMIT_LOG_LEVEL is not one of"},
		{"bad Lambda log level", map[string]string{"AWS_LAMBDA_LOG_LEVEL": "LOUD"}, durableFile, "AWS_LAMBDA_LOG_LEVEL is not one of"},
		{"reserved namespace", map[string]string{setup.EnvMetricsNamespace: "AWS/Lambda"}, durableFile, "reserved for AWS"},
		{"no policies", nil, "", "no policy file"},
		{"bad policy file", nil, "version: 1\npolicies: []\n", "`policies` is empty"},
		{"missing policy file", map[string]string{setup.EnvPolicyFile: "/nonexistent/policies.yaml"}, durableFile, "EDGELIMIT_POLICY_FILE"},
		{"override of an unknown policy", map[string]string{setup.EnvOverrides: "dialy.limit=5"}, durableFile, `names policy "dialy", which the policy file does not have (it has daily, burst)`},
		{"override of an unknown field", map[string]string{setup.EnvOverrides: "daily.key=ip"}, durableFile, `field "key" cannot be overridden`},
		{"override without value", map[string]string{setup.EnvOverrides: "daily.limit="}, durableFile, "has no value"},
		{"override not a number", map[string]string{setup.EnvOverrides: "daily.limit=lots"}, durableFile, "limit must be a whole number"},
		{"override not field=value", map[string]string{setup.EnvOverrides: "daily=5"}, durableFile, "is not policy.field=value"},
		{"override the file rejects", map[string]string{setup.EnvOverrides: "daily.burst=5"}, durableFile, "burst applies only to algorithm gcra"},
		{"override window without unit", map[string]string{setup.EnvOverrides: "daily.window=10"}, durableFile, `needs a unit`},
		{"shadow of an unknown policy", map[string]string{setup.EnvShadow: "dialy"}, durableFile, `EDGELIMIT_SHADOW names policy "dialy"`},
		{"signed without key ring", map[string]string{setup.EnvSecrets: ""}, signedFile, "EDGELIMIT_SECRETS is not set"},
		{"signed with a short key", map[string]string{setup.EnvSecrets: "k1:c2hvcnQtc2VjcmV0"}, signedFile, "entry 1 of EDGELIMIT_SECRETS: the secret decodes to 12 bytes"},
		{"signed with a bad entry", map[string]string{setup.EnvSecrets: "just-a-secret"}, signedFile, "entry 1 of EDGELIMIT_SECRETS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, stderr, err := fromEnv(t, tt.vars, tt.policies)
			if err == nil {
				t.Fatalf("FromEnv = nil error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("FromEnv error = %q, want it to contain %q", err, tt.want)
			}
			for _, secret := range []string{"wJalrXUtnFEMI", testKey, "c2hvcnQtc2VjcmV0", "just-a-secret"} {
				if strings.Contains(err.Error(), secret) || strings.Contains(stderr.String(), secret) {
					t.Errorf("a secret leaked into the error or the logs: %q / %q", err, stderr)
				}
			}
		})
	}
}

func TestFromEnvErrorsWrapErrEnv(t *testing.T) {
	_, _, _, err := fromEnv(t, map[string]string{setup.EnvHashKey: ""}, durableFile)
	if !errors.Is(err, setup.ErrEnv) {
		t.Errorf("FromEnv error %v does not wrap ErrEnv", err)
	}
}

func TestFromEnvAppliesOverridesAndShadow(t *testing.T) {
	e, _, _, err := fromEnv(t, map[string]string{
		setup.EnvOverrides: "daily.limit=5, daily.window=1d,burst.on_store_error=deny",
		setup.EnvShadow:    "burst",
	}, durableFile)
	if err != nil {
		t.Fatal(err)
	}
	daily, burst := e.Policies.Policies[0], e.Policies.Policies[1]
	if daily.Limit != 5 || daily.Window != 24*time.Hour || daily.Shadow {
		t.Errorf("daily = limit %d window %s shadow %v, want 5, 24h, false", daily.Limit, daily.Window, daily.Shadow)
	}
	if burst.Limit != 10 || !burst.Shadow || burst.OnStoreError != policy.FailClosed {
		t.Errorf("burst = limit %d shadow %v on_store_error %s, want 10, true, deny", burst.Limit, burst.Shadow, burst.OnStoreError)
	}
	if !strings.Contains(e.Policies.Source, "EDGELIMIT_OVERRIDES and EDGELIMIT_SHADOW") {
		t.Errorf("Source = %q, want it to name the overrides", e.Policies.Source)
	}
}

func TestFromEnvShadowAll(t *testing.T) {
	e, _, _, err := fromEnv(t, map[string]string{setup.EnvShadow: "*"}, durableFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range e.Policies.Policies {
		if !p.Shadow {
			t.Errorf("policy %s not in shadow mode with EDGELIMIT_SHADOW=*", p.Name)
		}
	}
}

func TestOverrideTreeSetsBurstOfGCRA(t *testing.T) {
	file := "version: 1\npolicies:\n  - {name: search, routes: [\"GET /search\"], key: ip, strategy: durable, algorithm: gcra, limit: 10, window: 1s, burst: 20}\n"
	doc, err := policy.Decode("x", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	out, err := setup.OverrideTree(doc, "search.limit=3,search.window=1000d,search.burst=3", "")
	if err != nil {
		t.Fatal(err)
	}
	if orig, _ := policy.ParseTree("x", doc); orig == nil || orig.Policies[0].Limit != 10 {
		t.Errorf("OverrideTree changed the tree it was given")
	}
	pf, err := policy.ParseTree("x", out)
	if err != nil {
		t.Fatalf("policy.ParseTree(edited) = %v", err)
	}
	p := pf.Policies[0]
	if burst := p.Options.(*durablecounter.Options).Burst; p.Limit != 3 || burst != 3 || p.Window != 1000*24*time.Hour {
		t.Errorf("search = limit %d burst %d window %s, want 3, 3, 24000h", p.Limit, burst, p.Window)
	}
}

func TestFromEnvPolicyFileReplacesEmbedded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(durableFile, "limit: 1000", "limit: 77", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	e, _, _, err := fromEnv(t, map[string]string{setup.EnvPolicyFile: path}, "version: 1\nnot a policy file")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Policies.Policies[0].Limit; got != 77 {
		t.Errorf("daily limit = %d, want 77 from %s", got, path)
	}
}

// TestFromEnvStoreDownWiresLogsAndMetrics builds a real engine on a
// DynamoDB endpoint where nothing listens: the fail-closed policy answers
// 503 and the fail-open one is degraded, each store failure is logged as
// JSON with the policy named, and every decision writes an EMF line.
func TestFromEnvStoreDownWiresLogsAndMetrics(t *testing.T) {
	e, stdout, stderr, err := fromEnv(t, map[string]string{
		setup.EnvEndpoint:          "http://127.0.0.1:1",
		setup.EnvLogLevel:          "debug",
		setup.EnvOverrides:         "daily.store_timeout=2s,burst.store_timeout=2s",
		"AWS_LAMBDA_FUNCTION_NAME": "ignored: EnvConfig.Function wins",
	}, durableFile)
	if err != nil {
		t.Fatal(err)
	}
	v := e.Engine.Decide(context.Background(), &edgelimit.Input{
		Method: "GET", Path: "/paid/report", SourceIP: "192.0.2.1",
		Header: limitertest.Headers{"x-api-key": "k-123"},
	})
	if v.Allowed || v.Status != 503 {
		t.Fatalf("Decide = allowed %v status %d, want 503 (daily fails closed)", v.Allowed, v.Status)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) == 0 {
		t.Fatalf("no EMF line on stdout")
	}
	for _, m := range lines {
		if m["Degraded"] != float64(1) || m["Function"] != "paid" || m["Route"] != "GET /paid/*" {
			t.Errorf("EMF line %v, want Degraded 1, Function paid, Route GET /paid/*", m)
		}
	}
	logs := stderr.String()
	if !strings.Contains(logs, `"message":"edgelimit: store failed"`) || !strings.Contains(logs, `"policy":"daily"`) {
		t.Errorf("logs lack the store failure of policy daily:\n%s", logs)
	}
	if !strings.Contains(logs, `"message":"edgelimit: ready"`) {
		t.Errorf("debug level did not log the ready line:\n%s", logs)
	}
	if strings.Contains(logs, "wJalrXUtnFEMI") || strings.Contains(logs, testKey) {
		t.Errorf("a secret leaked into the logs:\n%s", logs)
	}
}

func TestFromEnvMetricsOff(t *testing.T) {
	e, _, _, err := fromEnv(t, map[string]string{setup.EnvMetricsNamespace: "off"}, durableFile)
	if err != nil {
		t.Fatal(err)
	}
	if e.Metrics != nil {
		t.Errorf("Metrics = %v, want nil with EDGELIMIT_METRICS_NAMESPACE=off", e.Metrics)
	}
}

func TestFromEnvBuildsSignedPolicies(t *testing.T) {
	ring := "k2:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32)) + ",k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	e, _, _, err := fromEnv(t, map[string]string{setup.EnvSecrets: ring, setup.EnvTable: ""}, signedFile)
	if err != nil {
		t.Fatalf("FromEnv = %v; a signed-only function needs no table", err)
	}
	v := e.Engine.Decide(context.Background(), &edgelimit.Input{Method: "POST", Path: "/tts", SourceIP: "192.0.2.1", Header: limitertest.Headers{}})
	if !v.Allowed {
		t.Errorf("first request without proof of work: status %d, want allowed (a free window)", v.Status)
	}
}

// A durable policy with proof_of_work is gated: below its threshold as
// usual, above it a challenge keyed by EDGELIMIT_SECRETS, which it needs.
func TestFromEnvGatesProofOfWork(t *testing.T) {
	const file = `version: 1
policies:
  - {name: search, routes: ["GET /search"], key: ip, strategy: durable, limit: 4, window: 1m, proof_of_work: {above: 2, bits: 4}}
`
	ring := "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	_, _, _, err := fromEnv(t, nil, file)
	if err == nil || !strings.Contains(err.Error(), "EDGELIMIT_SECRETS is not set; policies search ask for proof of work") {
		t.Fatalf("without a ring: %v", err)
	}
	var stdout, stderr bytes.Buffer
	e, err := setup.FromEnv(context.Background(), setup.EnvConfig{
		Backends: []setup.Backend{memory.Durable()}, Policies: []byte(file), Getenv: env(map[string]string{setup.EnvSecrets: ring}),
		Stdout: &stdout, Stderr: &stderr, Now: func() time.Time { return time.Unix(1_700_000_000, 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 {
		v := e.Engine.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/search", SourceIP: "192.0.2.1"})
		ch := ""
		for _, f := range v.Header() {
			if f.Name == "Edgelimit-Challenge" {
				ch = "challenge"
			}
		}
		got = append(got, fmt.Sprintf("%v %s", v.Allowed, ch))
	}
	if want := []string{"true ", "true ", "false challenge"}; !slices.Equal(got, want) {
		t.Errorf("decisions %q, want %q", got, want)
	}
}
