package secretsmanager_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/edgelimit/edgelimit/setup/secretsmanager"
)

// TestLinksNoAWSSDK pins the cold-start fix of issue #16: the AWS SDK's
// Secrets Manager client (its endpoint rules, schemas and middleware) added
// 0.3-1.1 MB to every bootstrap and its package init ran on every cold
// start, for one GetSecretValue; tts linked the SDK for that alone.
func TestLinksNoAWSSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/edgelimit/edgelimit/setup/secretsmanager").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2") || strings.HasPrefix(p, "github.com/aws/smithy-go") {
			t.Errorf("setup/secretsmanager links %s", p)
		}
	}
}

// The regional endpoint is the region's partition's, as the SDK resolves
// it with no endpoint options set.
func TestEndpointURL(t *testing.T) {
	for region, want := range map[string]string{
		"us-east-1":       "https://secretsmanager.us-east-1.amazonaws.com/",
		"eu-central-2":    "https://secretsmanager.eu-central-2.amazonaws.com/",
		"us-gov-west-1":   "https://secretsmanager.us-gov-west-1.amazonaws.com/",
		"cn-north-1":      "https://secretsmanager.cn-north-1.amazonaws.com.cn/",
		"us-iso-east-1":   "https://secretsmanager.us-iso-east-1.c2s.ic.gov/",
		"us-isob-east-1":  "https://secretsmanager.us-isob-east-1.sc2s.sgov.gov/",
		"us-isof-south-1": "https://secretsmanager.us-isof-south-1.csp.hci.ic.gov/",
		"eu-isoe-west-1":  "https://secretsmanager.eu-isoe-west-1.cloud.adc-e.uk/",
		"eusc-de-east-1":  "https://secretsmanager.eusc-de-east-1.amazonaws.eu/",
	} {
		if got, err := secretsmanager.EndpointURL("", region); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", region, got, err, want)
		}
	}
	if got, err := secretsmanager.EndpointURL("http://127.0.0.1:4566/", "us-east-1"); err != nil || got != "http://127.0.0.1:4566/" {
		t.Errorf("override: %q, %v", got, err)
	}
	for _, bad := range []string{"us-east-1.evil.example/x", "US-EAST-1", "us east"} {
		if _, err := secretsmanager.EndpointURL("", bad); err == nil {
			t.Errorf("region %q accepted", bad)
		}
	}
	if _, err := secretsmanager.EndpointURL("127.0.0.1:4566", "us-east-1"); err == nil {
		t.Error("an endpoint without a scheme was accepted")
	}
}

// fakeSM is a Secrets Manager stand-in for the error paths moto cannot
// produce (access denied, throttling, server errors, a broken body). It
// checks every request as AWS would: the JSON-1.1 target and body, and the
// signature, recomputed with the SDK's signer from what arrived.
type fakeSM struct {
	t       *testing.T
	calls   atomic.Int32
	respond func(n int, w http.ResponseWriter)
}

const (
	keyID, secretKey, sessionToken = "ASIAFAKE", "fake/secret+key", "FwoGZXIvYXdzEJr//token=="
	region                         = "eu-west-1"
)

func (f *fakeSM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(f.calls.Add(1))
	body, _ := io.ReadAll(r.Body)
	if r.Method != "POST" || r.URL.Path != "/" || r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" ||
		r.Header.Get("Content-Type") != "application/x-amz-json-1.1" || string(body) != `{"SecretId":"edgelimit"}` {
		f.t.Errorf("request %s %s %v %s", r.Method, r.URL, r.Header, body)
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		f.t.Errorf("X-Amz-Date: %v", err)
	}
	// Re-sign what arrived, with only the headers the client signed.
	again, _ := http.NewRequest("POST", "http://"+r.Host+"/", strings.NewReader(string(body)))
	auth := r.Header.Get("Authorization")
	if _, signed, ok := strings.Cut(auth, "SignedHeaders="); ok {
		signed, _, _ = strings.Cut(signed, ",")
		for _, h := range strings.Split(signed, ";") {
			if h != "host" && h != "content-length" && h != "x-amz-date" && h != "x-amz-security-token" {
				again.Header.Set(h, r.Header.Get(h))
			}
		}
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secretKey, SessionToken: sessionToken},
		again, hex.EncodeToString(sum[:]), "secretsmanager", region, at); err != nil {
		f.t.Fatal(err)
	}
	if want := again.Header.Get("Authorization"); auth != want || r.Header.Get("X-Amz-Security-Token") != sessionToken {
		f.t.Errorf("signature\n got %s\nwant %s", auth, want)
	}
	f.respond(n, w)
}

func awsError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Requestid", "req-1234")
	w.WriteHeader(status)
	io.WriteString(w, `{"__type":"`+typ+`","message":"`+msg+`"}`)
}

const marker = "Zm9vYmFyYmF6cXV4cXV1eA" // a secret value that must never be echoed

func secretOK(w http.ResponseWriter) {
	io.WriteString(w, `{"ARN":"arn:aws:secretsmanager:eu-west-1:123456789012:secret:edgelimit-AbCdEf","Name":"edgelimit","SecretString":"`+marker+`","VersionId":"v1"}`)
}

func read(t *testing.T, f *fakeSM) (string, error) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	vars := map[string]string{secretsmanager.EnvEndpoint: srv.URL, "AWS_REGION": region,
		"AWS_ACCESS_KEY_ID": keyID, "AWS_SECRET_ACCESS_KEY": secretKey, "AWS_SESSION_TOKEN": sessionToken}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return secretsmanager.Source().SecretString(ctx, func(k string) string { return vars[k] }, "edgelimit")
}

func TestSecretStringSignedCall(t *testing.T) {
	f := &fakeSM{t: t, respond: func(int, http.ResponseWriter) {}}
	f.respond = func(_ int, w http.ResponseWriter) { secretOK(w) }
	if s, err := read(t, f); err != nil || s != marker {
		t.Fatalf("SecretString = %q, %v", s, err)
	}
}

// Each failure is a clear error: Secrets Manager's code and message, the
// status and the request id; retried only when another attempt may
// succeed; never with the secret's value, even when the body holding it
// cannot be read.
func TestSecretStringErrors(t *testing.T) {
	secretsmanager.NoBackoff(t)
	for _, tc := range []struct {
		name    string
		respond func(n int, w http.ResponseWriter)
		calls   int
		want    []string // in the message
		code    string   // the *APIError's; "none" when there is none
	}{
		{"access denied", func(_ int, w http.ResponseWriter) {
			awsError(w, 400, "AccessDeniedException", "User: arn:aws:sts::123456789012:assumed-role/fn/x is not authorized to perform: secretsmanager:GetSecretValue")
		}, 1, []string{"GetSecretValue of edgelimit", "AccessDeniedException (HTTP 400, request id req-1234): User: arn:aws:sts::123456789012:assumed-role/fn/x is not authorized"}, "AccessDeniedException"},
		{"not found, qualified type", func(_ int, w http.ResponseWriter) {
			awsError(w, 400, "com.amazonaws.secretsmanager#ResourceNotFoundException:http://internal", "Secrets Manager can't find the specified secret.")
		}, 1, []string{"ResourceNotFoundException (HTTP 400", "can't find the specified secret"}, "ResourceNotFoundException"},
		{"throttled throughout", func(_ int, w http.ResponseWriter) {
			awsError(w, 400, "ThrottlingException", "Rate exceeded")
		}, 3, []string{"(3 attempts)", "ThrottlingException (HTTP 400, request id req-1234): Rate exceeded"}, "ThrottlingException"},
		{"server error throughout", func(_ int, w http.ResponseWriter) {
			awsError(w, 500, "InternalServiceError", "internal error")
		}, 3, []string{"(3 attempts)", "InternalServiceError (HTTP 500"}, "InternalServiceError"},
		{"a proxy's page", func(_ int, w http.ResponseWriter) {
			w.WriteHeader(403)
			io.WriteString(w, "<html>"+marker+"</html>")
		}, 1, []string{"Forbidden (HTTP 403)"}, ""},
		{"a 200 that is not JSON", func(_ int, w http.ResponseWriter) {
			io.WriteString(w, `{"SecretString":"`+marker)
		}, 1, []string{"unexpected response", "not a JSON object"}, "none"},
		{"binary secret", func(_ int, w http.ResponseWriter) {
			io.WriteString(w, `{"Name":"edgelimit","SecretBinary":"`+marker+`"}`)
		}, 1, []string{"binary data"}, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSM{t: t, respond: tc.respond}
			_, err := read(t, f)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), marker[:10]) {
				t.Errorf("the secret's value shows: %v", err)
			}
			if got := int(f.calls.Load()); got != tc.calls {
				t.Errorf("%d calls, want %d", got, tc.calls)
			}
			var ae *secretsmanager.APIError
			if got := errors.As(err, &ae); got != (tc.code != "none") || got && ae.Code != tc.code {
				t.Errorf("APIError %+v, want code %q", ae, tc.code)
			}
		})
	}
}

// A throttled or failed call that succeeds on a retry is no error, as it
// was not with the SDK's retryer.
func TestSecretStringRetries(t *testing.T) {
	secretsmanager.NoBackoff(t)
	f := &fakeSM{t: t}
	f.respond = func(n int, w http.ResponseWriter) {
		switch n {
		case 1:
			awsError(w, 400, "ThrottlingException", "Rate exceeded")
		case 2:
			awsError(w, 503, "ServiceUnavailable", "")
		default:
			secretOK(w)
		}
	}
	if s, err := read(t, f); err != nil || s != marker || f.calls.Load() != 3 {
		t.Fatalf("SecretString = %q, %v after %d calls; want the secret after 3", s, err, f.calls.Load())
	}
}

// A network error is retried too, and the last one is reported.
func TestSecretStringUnreachable(t *testing.T) {
	secretsmanager.NoBackoff(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	vars := map[string]string{secretsmanager.EnvEndpoint: url}
	_, err := secretsmanager.Source().SecretString(context.Background(), func(k string) string { return vars[k] }, "edgelimit")
	if err == nil || !strings.Contains(err.Error(), "GetSecretValue of edgelimit (3 attempts)") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error %v", err)
	}
}
