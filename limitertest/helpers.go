package limitertest

import (
	"context"
	"strings"

	"github.com/edgelimit/edgelimit"
)

// Helpers for the tests of limiters, adapters and programs built on
// edgelimit: a limiter from a function, request headers from a map, and
// the problem body a client receives.

// LimiterFunc adapts a function to edgelimit.Limiter.
type LimiterFunc func(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error)

// Allow calls f(ctx, req).
func (f LimiterFunc) Allow(ctx context.Context, req edgelimit.Request) (edgelimit.Decision, error) {
	return f(ctx, req)
}

// Headers are request headers for an edgelimit.Input or Request, looked up
// case-insensitively, as the adapters do.
type Headers map[string]string

// Get returns the value of name, matching case-insensitively.
func (h Headers) Get(name string) string {
	if v, ok := h[name]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// Problem is the RFC 9457 problem body edgelimit sends with a 400, 403,
// 429 or 503, as a client decodes it (its extension members aside).
type Problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	RetryAfter       int64    `json:"retry-after,omitempty"`
}
