package edgelimit

import (
	"context"
	_ "embed"
)

type verdictKey struct{}

// NewContext returns ctx carrying v, so the wrapped handler can read the
// decisions that let its request through (remaining quota, route).
func NewContext(ctx context.Context, v *Verdict) context.Context {
	return context.WithValue(ctx, verdictKey{}, v)
}

// FromContext returns the Verdict the middleware stored in ctx, if any.
func FromContext(ctx context.Context) (*Verdict, bool) {
	v, ok := ctx.Value(verdictKey{}).(*Verdict)
	return v, ok
}

// ExamplePolicies is the repository's policies.yaml, embedded so that
// `edgelimit serve` runs with no file at all.
//
//go:embed policies.yaml
var ExamplePolicies []byte
