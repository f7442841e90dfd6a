// Package secretsmanager reads the functions' secrets from AWS Secrets
// Manager when they start (setup.EnvSecretID, setup.EnvTokenSecretID), so
// that the hash key and the token key ring are never part of a function's
// configuration, where anyone allowed lambda:GetFunctionConfiguration could
// read them. It costs one GetSecretValue per secret per cold start (about
// 20-40 ms in the same region) and the permission secretsmanager:
// GetSecretValue on those secrets only.
//
// GetSecretValue is one JSON-1.1 POST (X-Amz-Target:
// secretsmanager.GetSecretValue) signed with Signature Version 4
// (internal/awsenv), made with net/http: not through the AWS SDK's service
// client, whose endpoint rules, schemas and middleware stack added 0.3–1.1
// MB to every bootstrap and a quarter of a millisecond to every cold
// start's package init, for one call. What the SDK client did that matters
// here is kept: the regional endpoint of the region's partition (or
// AWS_ENDPOINT_URL_SECRETS_MANAGER, AWS_ENDPOINT_URL), the execution role's
// credentials from the environment, and retries of throttling, server
// errors and network errors (three attempts in all, jittered backoff,
// within the caller's deadline). An error response is an *APIError naming
// Secrets Manager's code (ResourceNotFoundException,
// AccessDeniedException, ThrottlingException, ...) and message; no error
// ever quotes a response body that could hold the secret.
package secretsmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/internal/awsenv"
	"github.com/edgelimit/edgelimit/setup"
)

// EnvEndpoint overrides the Secrets Manager endpoint (a local server, a VPC
// endpoint): the SDK's own variable name for it.
const EnvEndpoint = "AWS_ENDPOINT_URL_SECRETS_MANAGER"

// ErrResponse is wrapped by the error of a response that is not Secrets
// Manager's JSON (a proxy's page, a truncated body); its content is never
// quoted.
var ErrResponse = errors.New("secretsmanager: unexpected response")

// APIError is an error response of Secrets Manager. Its fields come from the
// error response (code, message, request id), which never holds a secret's
// value.
type APIError struct {
	// Code is the error's type: ResourceNotFoundException,
	// AccessDeniedException, ThrottlingException, DecryptionFailure, ...
	Code string
	// Message is Secrets Manager's explanation, at most 512 bytes of it.
	Message string
	// StatusCode is the HTTP status (400 for most errors, 5xx for the
	// service's own failures).
	StatusCode int
	// RequestID is x-amzn-RequestId, for AWS support.
	RequestID string
}

func (e *APIError) Error() string {
	s := e.Code
	if s == "" {
		s = http.StatusText(e.StatusCode)
	}
	s += " (HTTP " + strconv.Itoa(e.StatusCode)
	if e.RequestID != "" {
		s += ", request id " + e.RequestID
	}
	s += ")"
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Source returns the setup.SecretSource that reads secrets from Secrets
// Manager in the region and with the execution role's credentials that
// Lambda sets.
func Source() setup.SecretSource { return source{} }

type source struct{}

// attempts is how many times a throttled or failed call is made in all,
// as the SDK's standard retryer does.
const attempts = 3

// backoff is the wait before retry n (1, 2): jittered, 100-200 ms then
// 200-400 ms, short because a cold start is waiting. A variable for the
// tests.
var backoff = func(n int) time.Duration {
	base := time.Duration(100<<(n-1)) * time.Millisecond
	return base + rand.N(base)
}

// SecretString reads the current version of the secret id (a name or an
// ARN).
func (source) SecretString(ctx context.Context, getenv func(string) string, id string) (string, error) {
	endpoint := strings.TrimSpace(getenv(EnvEndpoint))
	if endpoint == "" {
		endpoint = strings.TrimSpace(getenv("AWS_ENDPOINT_URL"))
	}
	env, err := awsenv.FromEnv(getenv, endpoint != "")
	if err != nil {
		return "", fmt.Errorf("%w: reading secret %s: %w", setup.ErrEnv, id, err)
	}
	u, err := endpointURL(endpoint, env.Region)
	if err != nil {
		return "", fmt.Errorf("%w: reading secret %s: %w", setup.ErrEnv, id, err)
	}
	body, err := json.Marshal(struct {
		SecretID string `json:"SecretId"`
	}{id})
	if err != nil {
		return "", err
	}
	for n := 1; ; n++ {
		s, retry, err := getSecretValue(ctx, u, env, body)
		if err == nil {
			return s, nil
		}
		if !retry || n == attempts || ctx.Err() != nil {
			if retry && n == attempts {
				return "", fmt.Errorf("secretsmanager: GetSecretValue of %s (%d attempts): %w", id, n, err)
			}
			return "", fmt.Errorf("secretsmanager: GetSecretValue of %s: %w", id, err)
		}
		t := time.NewTimer(backoff(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("secretsmanager: GetSecretValue of %s: %w (after %v)", id, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// endpointURL is the endpoint override, or the regional endpoint in the
// region's partition (the DNS suffixes of the SDK's partitions.json).
func endpointURL(override, region string) (string, error) {
	if override != "" {
		u, err := url.Parse(override)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("secretsmanager: endpoint %q is not an http(s) URL", override)
		}
		return strings.TrimSuffix(u.String(), "/") + "/", nil
	}
	for _, r := range region {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return "", fmt.Errorf("secretsmanager: region %q is not an AWS region name", region)
		}
	}
	suffix := "amazonaws.com"
	for _, p := range [...]struct{ prefix, suffix string }{
		{"cn-", "amazonaws.com.cn"},
		{"eusc-", "amazonaws.eu"},
		{"us-isob-", "sc2s.sgov.gov"},
		{"us-isof-", "csp.hci.ic.gov"},
		{"us-iso-", "c2s.ic.gov"},
		{"eu-isoe-", "cloud.adc-e.uk"},
	} {
		if strings.HasPrefix(region, p.prefix) {
			suffix = p.suffix
			break
		}
	}
	return "https://secretsmanager." + region + "." + suffix + "/", nil
}

// getSecretValue makes one call; retry says whether another may succeed.
func getSecretValue(ctx context.Context, u string, env awsenv.Env, body []byte) (s string, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "secretsmanager.GetSecretValue")
	req.Header.Set("User-Agent", "edgelimit")
	env.Credentials.Sign(req, body, "secretsmanager", env.Region, time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		// A network error (the server is unreachable, the connection was
		// reset) may be transient; the context's end is not.
		return "", ctx.Err() == nil, err
	}
	defer resp.Body.Close()
	// A secret is at most 64 KiB; its JSON, escaped, at most a few times that.
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", ctx.Err() == nil, fmt.Errorf("%w: reading the body: %w", ErrResponse, err)
	}
	if resp.StatusCode != http.StatusOK {
		ae := apiError(resp, data)
		return "", retryable(ae), ae
	}
	var out struct {
		SecretString *string
	}
	if err := json.Unmarshal(data, &out); err != nil {
		// The body may hold the secret: json's message could quote it.
		return "", false, fmt.Errorf("%w: HTTP 200 with a body that is not a JSON object", ErrResponse)
	}
	if out.SecretString == nil {
		return "", false, errors.New("secretsmanager: the secret holds binary data (SecretBinary), not the JSON object edgelimit reads")
	}
	return *out.SecretString, false, nil
}

// apiError reads an AWS JSON error response: the code from
// X-Amzn-ErrorType or the body's __type ("aws.protocol#Code:uri" forms
// cut to Code), the message from message or Message.
func apiError(resp *http.Response, data []byte) *APIError {
	var body struct {
		Type    string `json:"__type"`
		Code    string `json:"code"`
		Message string `json:"message"`
		Msg     string `json:"Message"`
	}
	_ = json.Unmarshal(data, &body) // an unreadable body leaves the status alone
	code := resp.Header.Get("X-Amzn-ErrorType")
	for _, c := range []string{body.Type, body.Code} {
		if code == "" {
			code = c
		}
	}
	if i := strings.IndexByte(code, ':'); i >= 0 {
		code = code[:i]
	}
	if i := strings.LastIndexByte(code, '#'); i >= 0 {
		code = code[i+1:]
	}
	msg := body.Message
	if msg == "" {
		msg = body.Msg
	}
	if len(msg) > 512 {
		msg = msg[:512] + "..."
	}
	return &APIError{Code: code, Message: msg, StatusCode: resp.StatusCode, RequestID: resp.Header.Get("X-Amzn-Requestid")}
}

// retryable: throttling and the service's own failures, as the SDK's
// standard retryer classifies them.
func retryable(e *APIError) bool {
	switch e.Code {
	case "ThrottlingException", "Throttling", "ThrottledException", "RequestThrottledException", "TooManyRequestsException",
		"RequestThrottled", "RequestLimitExceeded", "SlowDown", "PriorRequestNotComplete", "EC2ThrottledException",
		"TransactionInProgressException", "BandwidthLimitExceeded", "LimitExceededException", "RequestTimeout", "RequestTimeoutException":
		return true
	}
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}
