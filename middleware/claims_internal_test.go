package middleware

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

func load[T any](t *testing.T, name string) T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev T
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	return ev
}

// TestSampleClaims reads the claims of the real authorizer samples.
func TestSampleClaims(t *testing.T) {
	jwt := load[events.APIGatewayV2HTTPRequest](t, "apigw-v2-request-jwt-authorizer.json")
	lam := load[events.APIGatewayV2HTTPRequest](t, "apigw-v2-request-lambda-authorizer.json")
	none := load[events.APIGatewayV2HTTPRequest](t, "apigw-v2-request-no-authorizer.json")
	rest := load[events.APIGatewayProxyRequest](t, "apigw-request.json")
	cognito := load[events.APIGatewayProxyRequest](t, "apigw-request-cognito.json")

	getters := map[string]interface{ Get(string) string }{
		"jwt":     httpAPIClaims(jwt.RequestContext.Authorizer),
		"lambda":  httpAPIClaims(lam.RequestContext.Authorizer),
		"rest":    restAPIClaims(rest.RequestContext.Authorizer),
		"cognito": restAPIClaims(cognito.RequestContext.Authorizer),
	}
	tests := []struct {
		getter, claim, want string
	}{
		{"jwt", "sub", "user-123"},
		{"jwt", "scope", "read write"},
		{"jwt", "missing", ""},
		{"lambda", "sub", "user-123"},
		{"lambda", "tenant", "acme"},
		{"lambda", "userId", "42"},
		{"lambda", "premium", "true"},
		{"lambda", "ratio", "0.5"},
		{"lambda", "groups", ""},  // list: ignored
		{"lambda", "profile", ""}, // object: ignored
		{"rest", "principalId", "user-123"},
		{"rest", "sub", "user-123"},
		{"rest", "clientId", "1"},
		{"rest", "premium", "true"},
		{"cognito", "sub", "user-123"},
		{"cognito", "cognito:username", "jane"},
		{"cognito", "email_verified", "true"},
		{"cognito", "claims", ""}, // the claims map itself is nested
	}
	for _, tt := range tests {
		if got := getters[tt.getter].Get(tt.claim); got != tt.want {
			t.Errorf("%s.Get(%q) = %q, want %q", tt.getter, tt.claim, got, tt.want)
		}
	}
	if g := httpAPIClaims(none.RequestContext.Authorizer); g != nil {
		t.Errorf("no authorizer: claims = %v, want nil", g)
	}
}

func TestScalar(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{"x", "x"},
		{true, "true"},
		{false, "false"},
		{42.0, "42"},
		{1e21, "1000000000000000000000"},
		{-0.25, "-0.25"},
		{float32(1.5), "1.5"},
		{json.Number("12345678901234567890"), "12345678901234567890"},
		{7, "7"},
		{int64(-7), "-7"},
		{int32(3), "3"},
		{uint(3), "3"},
		{uint32(4), "4"},
		{uint64(5), "5"},
		{nil, ""},
		{[]any{"a"}, ""},
		{map[string]any{"a": "b"}, ""},
	}
	for _, tt := range tests {
		if got := scalar(tt.in); got != tt.want {
			t.Errorf("scalar(%#v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRestClaimsPrecedence(t *testing.T) {
	m := restClaims{
		"sub":    "context",
		"tenant": "acme",
		"claims": map[string]string{"sub": "cognito"},
	}
	if got := m.Get("sub"); got != "cognito" {
		t.Errorf(`Claim("sub") = %q, want the Cognito claim "cognito"`, got)
	}
	if got := m.Get("tenant"); got != "acme" {
		t.Errorf(`Claim("tenant") = %q, want the context value "acme"`, got)
	}
	if restAPIClaims(nil) != nil {
		t.Errorf("restAPIClaims(nil) != nil")
	}
}

func TestEqualFold(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"RateLimit", "ratelimit", true},
		{"X-RateLimit-Limit", "x-ratelimit-limit", true},
		{"RateLimit", "RateLimit-Policy", false},
		{"a-b", "A_B", false},
		{"", "", true},
		{"[", "{", false}, // differ by 0x20 but are not letters
	}
	for _, tt := range tests {
		if got := equalFold(tt.a, tt.b); got != tt.want {
			t.Errorf("equalFold(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
