package edgelimit

import (
	"context"
	"sync/atomic"
)

type verdictKey struct{}

// Context returns parent carrying v, for the wrapped handler: FromContext
// finds v in it and in every context derived from it while the request is
// being handled. The context lives in the request's own memory (one
// allocation with its keys and header values), never in the reused part
// of v, so a handler may keep it past the response: it keeps parent's
// values, deadline and cancellation, and from Release on it no longer
// carries v (FromContext reports false), unless the handler looked v up
// before, which keeps v the handler's. Call it once per Verdict.
func (v *Verdict) Context(parent context.Context) context.Context {
	if v.mem == nil { // a Verdict that is never reused
		c := &verdictCtx{Context: parent, v: v}
		c.state.Store(ctxHeld)
		return c
	}
	c := &v.mem.ctx
	c.Context, c.v = parent, v
	return c
}

// The states of a request's context, as FromContext and Release see them.
const (
	ctxLive     = iota // the request is being handled
	ctxHeld            // the handler looked the Verdict up: never reused
	ctxReleased        // the Verdict was released; the context no longer carries it
)

// verdictCtx is parent with one value: the verdict.
type verdictCtx struct {
	context.Context
	v     *Verdict
	state atomic.Uint32
}

func (c *verdictCtx) Value(key any) any {
	if _, ok := key.(verdictKey); ok {
		return c.verdict()
	}
	return c.Context.Value(key)
}

// verdict returns the Verdict for a lookup: holding it, so that Release
// leaves it to the handler; nil once it was released.
func (c *verdictCtx) verdict() *Verdict {
	for {
		switch c.state.Load() {
		case ctxHeld:
			return c.v
		case ctxReleased:
			return nil
		}
		if c.state.CompareAndSwap(ctxLive, ctxHeld) {
			return c.v
		}
	}
}

// String names the context as context.WithValue's do.
func (c *verdictCtx) String() string { return "edgelimit.Verdict context" }

// FromContext returns the Verdict the middleware stored in ctx, if any. The
// Verdict it returns is the caller's to keep: the engine never reuses a
// Verdict that was looked up. After the response (Release), a context
// kept from the request no longer carries one and FromContext reports
// false, unless it was looked up before.
func FromContext(ctx context.Context) (*Verdict, bool) {
	v, ok := ctx.Value(verdictKey{}).(*Verdict)
	return v, ok && v != nil
}
