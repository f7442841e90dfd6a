package limitertest

import (
	"context"
	"fmt"
	"strings"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/keyhash"
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

// HashedKeys returns n distinct client keys of policy as a limiter sees
// them: addresses hashed with a fixed secret the way the engine hashes a
// request's key. Benchmarks that visit them measure a realistic spread of
// keys (cache misses, map growth), not one hot key.
func HashedKeys(policy string, n int) []string {
	h, err := keyhash.New([]byte("benchmark-secret-benchmark-secret"))
	if err != nil {
		panic(err) // the secret is a constant of the right length
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = h.Hash(policy, fmt.Appendf(nil, "i:10.%d.%d.%d", i>>16, i>>8&255, i&255))
	}
	return keys
}
