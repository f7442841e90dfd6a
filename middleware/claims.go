package middleware

import (
	"encoding/json"
	"strconv"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
)

// contextClaims reads a Lambda authorizer's context (HTTP API
// requestContext.authorizer.lambda), whose values are JSON scalars.
type contextClaims map[string]any

// Get returns the value of name as text, or "" when absent or nested.
func (m contextClaims) Get(name string) string { return scalar(m[name]) }

// restClaims reads a REST API requestContext.authorizer: a Cognito user pool
// authorizer puts the token's claims in its "claims" map, a Lambda authorizer
// puts its context at the top level.
type restClaims map[string]any

// Get returns the Cognito claim name if there is one, else the context
// value name.
func (m restClaims) Get(name string) string {
	switch c := m["claims"].(type) {
	case map[string]any:
		if v, ok := c[name]; ok {
			return scalar(v)
		}
	case map[string]string:
		if v, ok := c[name]; ok {
			return v
		}
	}
	return scalar(m[name])
}

// scalar renders a JSON scalar as its text; objects, lists and null are "".
func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32)
	case json.Number:
		return x.String()
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint:
		return strconv.FormatUint(uint64(x), 10)
	}
	return ""
}

// httpAPIClaims returns the claims of an HTTP API authorizer: the JWT
// authorizer's claims, else the Lambda authorizer's context, else none.
func httpAPIClaims(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) edgelimit.Getter {
	switch {
	case a == nil:
		return nil
	case a.JWT != nil:
		return mapClaims(a.JWT.Claims)
	case a.Lambda != nil:
		return contextClaims(a.Lambda)
	}
	return nil
}

// restAPIClaims returns the claims of a REST API authorizer, or none.
func restAPIClaims(a map[string]any) edgelimit.Getter {
	if a == nil {
		return nil
	}
	return restClaims(a)
}
