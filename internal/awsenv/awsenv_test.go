package awsenv_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/edgelimit/edgelimit/internal/awsenv"
)

var t0 = time.Unix(1_700_000_000, 0)

// The AWS documentation's Signature Version 4 test vector (get-vanilla of
// the SigV4 test suite): an independent check that does not trust the SDK.
func TestSignVanillaVector(t *testing.T) {
	req, _ := http.NewRequest("GET", "https://example.amazonaws.com/", nil)
	c := awsenv.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}
	c.Sign(req, nil, "service", "us-east-1", time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC))
	want := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, " +
		"Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
	if got := req.Header.Get("Authorization"); got != want {
		t.Errorf("Authorization\n got %s\nwant %s", got, want)
	}
}

// Sign gives the SDK signer's Authorization header, byte for byte, for the
// requests setup/secretsmanager makes: a JSON-1.1 POST, with and without a
// session token, on AWS (default port dropped) and on a local server.
func TestSignMatchesSDKSigner(t *testing.T) {
	body := []byte(`{"SecretId":"arn:aws:secretsmanager:eu-west-1:123456789012:secret:edgelimit-AbCdEf"}`)
	for _, tc := range []struct {
		name, url, region string
		creds             awsenv.Credentials
	}{
		{"role credentials", "https://secretsmanager.eu-west-1.amazonaws.com/", "eu-west-1",
			awsenv.Credentials{AccessKeyID: "ASIAEXAMPLE", SecretAccessKey: "c2VjcmV0/key+example", SessionToken: "IQoJb3JpZ2luX2VjE//session+token=="}},
		{"long-term key", "https://secretsmanager.us-east-1.amazonaws.com:443/", "us-east-1",
			awsenv.Credentials{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}},
		{"local server", "http://127.0.0.1:5000/", "us-east-1", awsenv.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newReq := func() *http.Request {
				req, _ := http.NewRequest("POST", tc.url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/x-amz-json-1.1")
				req.Header.Set("X-Amz-Target", "secretsmanager.GetSecretValue")
				req.Header.Set("User-Agent", "edgelimit")
				return req
			}
			mine, sdk := newReq(), newReq()
			tc.creds.Sign(mine, body, "secretsmanager", tc.region, t0)
			sum := sha256.Sum256(body)
			err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{
				AccessKeyID: tc.creds.AccessKeyID, SecretAccessKey: tc.creds.SecretAccessKey, SessionToken: tc.creds.SessionToken,
			}, sdk, hex.EncodeToString(sum[:]), "secretsmanager", tc.region, t0)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
				if g, w := mine.Header.Get(h), sdk.Header.Get(h); g != w {
					t.Errorf("%s\n got %q\nwant %q (the SDK's)", h, g, w)
				}
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	got, err := awsenv.FromEnv(env(map[string]string{"AWS_DEFAULT_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t"}), false)
	if err != nil || got != (awsenv.Env{Region: "eu-west-1", Credentials: awsenv.Credentials{"a", "s", "t"}}) {
		t.Errorf("FromEnv = %+v, %v", got, err)
	}
	if _, err := awsenv.FromEnv(env(map[string]string{"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"}), false); !errors.Is(err, awsenv.ErrRegion) {
		t.Errorf("no region: %v", err)
	}
	if _, err := awsenv.FromEnv(env(map[string]string{"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "a"}), false); !errors.Is(err, awsenv.ErrCredentials) {
		t.Errorf("no secret key: %v", err)
	}
	if got, err := awsenv.FromEnv(env(nil), true); err != nil || got.Region != "us-east-1" || got.Credentials.AccessKeyID != "local" {
		t.Errorf("local = %+v, %v", got, err)
	}
}

// TestLinksNoAWSSDK: the package is what keeps the SDK out of a function
// that only reads its secrets (tts); linking any of it would bring the
// SDK's core back.
func TestLinksNoAWSSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/edgelimit/edgelimit/internal/awsenv").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/aws/") {
			t.Errorf("awsenv links %s", p)
		}
	}
}
