package handlers

import (
	"context"
	"hash/fnv"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit/middleware"
)

// PaidResponse is the body of a successful GET /paid/{resource}.
type PaidResponse struct {
	Resource  string `json:"resource"`
	RequestID string `json:"request_id,omitempty"`
	// Points is the metered product: a small deterministic series per
	// resource, standing in for a report someone pays for.
	Points []int   `json:"points"`
	Quota  []Quota `json:"quota,omitempty"`
}

// NewPaid returns the handler of GET /paid/{resource}: an API-key metered
// endpoint. The policies (paid-daily, paid-burst, paid-monthly) key on X-Api-Key, so a
// request without one never reaches it (400 from the middleware). The
// resource is 1-64 characters of a-z, 0-9, - and _.
func NewPaid(d Deps) middleware.HTTPAPIHandler {
	log := d.logger()
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		resource, ok := strings.CutPrefix(req.RawPath, "/paid/")
		if !ok || !validResource(resource) {
			return badRequest("The resource must be /paid/ followed by 1 to 64 characters of a-z, 0-9, - and _.")
		}
		log.DebugContext(ctx, "paid: serving", "resource", resource)
		return jsonResponse(200, PaidResponse{
			Resource:  resource,
			RequestID: req.RequestContext.RequestID,
			Points:    series(resource, 12),
			Quota:     quotas(ctx),
		})
	}
}

func validResource(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// series returns n deterministic values between 0 and 99 for name.
func series(name string, n int) []int {
	h := fnv.New64a()
	h.Write([]byte(name))
	x := h.Sum64() | 1
	out := make([]int, n)
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		out[i] = int(x % 100)
	}
	return out
}
