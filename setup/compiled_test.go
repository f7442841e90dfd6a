package setup_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
)

func fromEnvCompiled(t *testing.T, vars map[string]string, tree *policy.Node) (*setup.Env, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	return setup.FromEnvCompiled(context.Background(), setup.EnvConfig{
		Backends: allBackends, Tree: tree, PolicyFile: "test.yaml", Function: "paid",
		Getenv: env(vars), Stdout: &stdout, Stderr: &stderr,
		Now: func() time.Time { return time.Unix(1_700_000_000, 0) },
	})
}

// TestFromEnvCompiledIsFromEnv: the compiled tree with the overrides and
// shadow switches gives the policies FromEnv gives the YAML, and a mistake
// in an override the same message.
func TestFromEnvCompiledIsFromEnv(t *testing.T) {
	tree, err := policy.Decode("test.yaml", []byte(durableFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, vars := range []map[string]string{
		nil,
		{setup.EnvOverrides: "daily.limit=5,burst.window=2s,burst.on_store_error=allow", setup.EnvShadow: "burst"},
		{setup.EnvShadow: "*"},
	} {
		want, _, _, errA := fromEnv(t, vars, durableFile)
		got, errB := fromEnvCompiled(t, vars, tree)
		if errA != nil || errB != nil {
			t.Fatalf("%v: FromEnv %v, FromEnvCompiled %v", vars, errA, errB)
		}
		if !reflect.DeepEqual(got.Policies, want.Policies) {
			t.Errorf("%v: FromEnvCompiled's policies are not FromEnv's", vars)
		}
	}
	_, _, _, errA := fromEnv(t, map[string]string{setup.EnvOverrides: "burst.burst=3"}, durableFile)
	_, errB := fromEnvCompiled(t, map[string]string{setup.EnvOverrides: "burst.burst=3"}, tree)
	if errA == nil || errB == nil || errA.Error() != errB.Error() {
		t.Errorf("a burst on a fixed window: FromEnv %v, FromEnvCompiled %v; want one error, the same", errA, errB)
	}
	if _, err := policy.ParseTree("test.yaml", tree); err != nil {
		t.Fatal(err)
	}
}

// TestFromEnvCompiledReadsAJSONPolicyFile: EDGELIMIT_POLICY_FILE replaces
// the compiled tree with a file in JSON; a YAML file is refused, saying so.
func TestFromEnvCompiledReadsAJSONPolicyFile(t *testing.T) {
	tree, err := policy.Decode("test.yaml", []byte(durableFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "policies.json")
	doc := `{"version": 1, "policies": [{"name": "daily", "routes": ["GET /paid/*"], "key": "header:X-Api-Key", "strategy": "durable", "limit": 77, "window": "24h"}]}`
	if err := os.WriteFile(jsonPath, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := fromEnvCompiled(t, map[string]string{setup.EnvPolicyFile: jsonPath}, tree)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Policies.Policies) != 1 || e.Policies.Policies[0].Limit != 77 || e.Policies.Source != jsonPath {
		t.Errorf("policies from %s: %+v", jsonPath, e.Policies)
	}
	yamlPath := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(yamlPath, []byte(durableFile), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = fromEnvCompiled(t, map[string]string{setup.EnvPolicyFile: yamlPath}, tree)
	if err == nil || !strings.Contains(err.Error(), yamlPath+":1: not valid JSON") || !strings.Contains(err.Error(), "in JSON") {
		t.Errorf("a YAML replacement file: error %v, want one naming the file and asking for JSON", err)
	}
}
