package edgelimit

import "context"

type verdictKey struct{}

// Context returns parent carrying v, for the wrapped handler: FromContext
// finds v in it and in every context derived from it. It costs no
// allocation: the context lives in the Verdict (except for the Verdict
// shared by requests no policy guards, which gets a context of its own).
// Call it once per Verdict.
func (v *Verdict) Context(parent context.Context) context.Context {
	if v == unguarded {
		return context.WithValue(parent, verdictKey{}, v)
	}
	v.ctx = verdictCtx{Context: parent, v: v}
	return &v.ctx
}

// verdictCtx is parent with one value: the verdict.
type verdictCtx struct {
	context.Context
	v *Verdict
}

func (c *verdictCtx) Value(key any) any {
	if _, ok := key.(verdictKey); ok {
		return c.v
	}
	return c.Context.Value(key)
}

// String names the context as context.WithValue's do.
func (c *verdictCtx) String() string { return "edgelimit.Verdict context" }

// FromContext returns the Verdict the middleware stored in ctx, if any.
func FromContext(ctx context.Context) (*Verdict, bool) {
	v, ok := ctx.Value(verdictKey{}).(*Verdict)
	return v, ok
}
