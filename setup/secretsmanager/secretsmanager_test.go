package secretsmanager_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sm "github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/memory"
	"github.com/edgelimit/edgelimit/setup/secretsmanager"
	"github.com/edgelimit/edgelimit/setup/signed"
)

const policies = `version: 1
policies:
  - {name: paid, routes: ["GET /paid/*"], key: header:X-Api-Key, strategy: durable, limit: 10, window: 1m}
  - {name: tts, routes: ["POST /tts"], key: ip, strategy: signed, limit: 2, window: 1m}
`

// motoEndpoint is the moto server the test runner started (it serves
// Secrets Manager beside DynamoDB), or a skip.
func motoEndpoint(t *testing.T) string {
	t.Helper()
	ep := os.Getenv(ddbtest.EnvMoto)
	if ep == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: in CI the moto server must run (make test starts it)", ddbtest.EnvMoto)
		}
		t.Skipf("%s not set; run through internal/tools/testservers", ddbtest.EnvMoto)
	}
	return ep
}

func createSecret(t *testing.T, endpoint, value string) string {
	t.Helper()
	c := sm.New(sm.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), HTTPClient: awshttp.NewBuildableClient(),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")})
	name := fmt.Sprintf("edgelimit-test-%d", time.Now().UnixNano())
	out, err := c.CreateSecret(context.Background(), &sm.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)})
	if err != nil {
		t.Fatal(err)
	}
	return *out.ARN
}

var (
	hashKey = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5a}, 32))
	ring    = "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x3c}, 32))
)

func fromEnv(t *testing.T, vars map[string]string) (*setup.Env, string, error) {
	t.Helper()
	var logs bytes.Buffer
	e, err := setup.FromEnv(context.Background(), setup.EnvConfig{
		Policies: []byte(policies), PolicyFile: "p.yaml", Function: "paid",
		Backends: []setup.Backend{memory.Durable(), signed.Backend()},
		Secrets:  secretsmanager.Source(),
		Getenv:   func(k string) string { return vars[k] },
		Stdout:   &bytes.Buffer{}, Stderr: &logs,
	})
	return e, logs.String(), err
}

// The init path as it runs on Lambda: one secret holds the hash key and the
// key ring; the engine hashes keys with the secret's hash key, exactly as an
// engine given EDGELIMIT_HASH_KEY does, and signs with its ring.
func TestFromEnvReadsTheSecret(t *testing.T) {
	ep := motoEndpoint(t)
	arn := createSecret(t, ep, fmt.Sprintf(`{"hash_key":%q,"token_secrets":%q}`, hashKey, ring))
	fromSecret, _, err := fromEnv(t, map[string]string{setup.EnvSecretID: arn, secretsmanager.EnvEndpoint: ep, "AWS_REGION": "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	fromVars, _, err := fromEnv(t, map[string]string{setup.EnvHashKey: hashKey, setup.EnvSecrets: ring})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := fromSecret.Engine.KeyOf("paid", "alice")
	b, _ := fromVars.Engine.KeyOf("paid", "alice")
	if a == "" || a != b {
		t.Errorf("keys differ: from the secret %q, from the variable %q", a, b)
	}
	// A window token one signs is honoured by the other: the same ring.
	in := &edgelimit.Input{Method: "POST", Path: "/tts", SourceIP: "192.0.2.1"}
	v := fromSecret.Engine.Decide(context.Background(), in)
	token := ""
	for _, f := range v.Header() {
		if f.Name == "Edgelimit-Token" {
			token = f.Value
		}
	}
	if !v.Allowed || token == "" {
		t.Fatalf("first signed request: %+v", v)
	}
	in.Header = http.Header{"Edgelimit-Token": {token}}
	if v := fromVars.Engine.Decide(context.Background(), in); !v.Allowed || v.Decisions[0].Remaining != 0 {
		t.Errorf("the token signed with the secret's ring was not honoured by the variable's: %+v", v.Decisions)
	}

	// The ring may live in a secret of its own, which only the signing
	// function is allowed to read.
	hashOnly := createSecret(t, ep, fmt.Sprintf(`{"hash_key":%q}`, hashKey))
	tokens := createSecret(t, ep, fmt.Sprintf(`{"token_secrets":%q}`, ring))
	if _, _, err := fromEnv(t, map[string]string{setup.EnvSecretID: hashOnly, setup.EnvTokenSecretID: tokens, secretsmanager.EnvEndpoint: ep}); err != nil {
		t.Fatalf("two secrets: %v", err)
	}
	// Without the ring anywhere, the signed policy cannot start.
	if _, _, err := fromEnv(t, map[string]string{setup.EnvSecretID: hashOnly, secretsmanager.EnvEndpoint: ep}); err == nil || !strings.Contains(err.Error(), setup.EnvSecrets) {
		t.Errorf("no ring: %v, want an error naming %s", err, setup.EnvSecrets)
	}
}

// Every way the secret can be wrong is a clear start-up error that wraps
// setup.ErrEnv and never shows the secret's content.
func TestFromEnvSecretErrors(t *testing.T) {
	ep := motoEndpoint(t)
	const marker = "Zm9vYmFyYmF6cXV4cXV1eA" // a distinctive run that must never be echoed
	for _, tc := range []struct {
		name, value string
		vars        map[string]string
		want        string
	}{
		{"not JSON", marker + " not json", nil, "is not a JSON object like"},
		{"no hash_key", `{"token_secrets":"` + marker + `"}`, nil, "has no hash_key"},
		{"short hash_key", `{"hash_key":"` + marker + `"}`, nil, setup.EnvHashKey},
		{"also the variable", `{"hash_key":"` + hashKey + `"}`, map[string]string{setup.EnvHashKey: hashKey}, "both " + setup.EnvSecretID + " and " + setup.EnvHashKey},
		{"missing secret", "", nil, "GetSecretValue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "edgelimit-does-not-exist"
			if tc.value != "" {
				id = createSecret(t, ep, tc.value)
			}
			vars := map[string]string{setup.EnvSecretID: id, secretsmanager.EnvEndpoint: ep, setup.EnvSecrets: ring}
			for k, v := range tc.vars {
				vars[k] = v
			}
			_, logs, err := fromEnv(t, vars)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if tc.name != "missing secret" && !errors.Is(err, setup.ErrEnv) {
				t.Errorf("%v does not wrap setup.ErrEnv", err)
			}
			if strings.Contains(err.Error(), marker[:10]) || strings.Contains(logs, marker[:10]) {
				t.Errorf("the secret's content shows: %v / %s", err, logs)
			}
		})
	}
	// A program that reads no secrets refuses the variable rather than
	// ignoring it.
	_, err := setup.FromEnv(context.Background(), setup.EnvConfig{Policies: []byte(policies), Backends: []setup.Backend{memory.Durable(), signed.Backend()},
		Getenv: func(k string) string { return map[string]string{setup.EnvSecretID: "x", setup.EnvSecrets: ring}[k] }, Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	if err == nil || !strings.Contains(err.Error(), "reads no secrets") {
		t.Errorf("no SecretSource: %v", err)
	}
}
