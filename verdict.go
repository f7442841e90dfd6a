package edgelimit

import (
	"sync"
	"unsafe"
)

// Verdict is the engine's answer for one request.
//
// Lifetime. Decide returns a Verdict the caller owns until it calls
// Release; the middleware releases it once the response is written (and
// Finish has run), and the engine reuses it for a later request. After
// Release the caller must not use it, nor the slices it returned
// (Decisions, Body, Header()). What a response keeps is never reused: the
// header values (Header()[i].Value and Values(i)), the hashed keys handed
// to the limiters and the context Context returns live in memory of the
// request's own, which the garbage collector frees when nothing refers to
// it any more. A Verdict a handler looked up with FromContext is never
// reused either: it stays the handler's for as long as it keeps it, and
// always describes its own request. A caller that never calls Release
// (a test, a program that keeps its Verdicts) is correct too; it only
// forgoes the reuse.
//
// It is read-only: Decide may return the same Verdict for many requests
// (those no policy covers).
type Verdict struct {
	// Allowed: run the handler and add Header() to its response.
	Allowed bool
	// Status is 0 when Allowed, else the status to answer with (400, 403, 429, 503).
	Status int
	// Route labels the matched policies for logs and metrics ("" if none).
	Route string
	// Decisions has one entry per policy guarding the route that was decided
	// and is not a shadow policy (shadow policies are never shown), in file
	// order. When Allowed, every such policy admitted the request. It is
	// valid until Release.
	Decisions []Decision
	// Body is the problem+json body when !Allowed; valid until Release
	// (copy it to keep it).
	Body []byte

	fields [8]Field
	fvals  [8][]string // each field's value as a one-element slice (Values)
	n      int
	more   []Field
	// finish is what Finish needs, for a route with work after the
	// response; nil otherwise.
	finish *finishState

	// The reusable part, sized for the route's policies: the per-request
	// state of each policy, the Decisions' backing array, the time budgets
	// of the policies' first store calls, the problem body's buffer.
	slots   []slot
	decBuf  []Decision
	budgets []budgetCtx
	bodyBuf []byte
	// pool is where Release puts the Verdict back; nil for one that is
	// not reused (the shared unguarded Verdict, a 400 or a 403).
	pool *sync.Pool
	// mem is this request's own memory; used is how much of its text is
	// taken, nvals how many of its values.
	mem   *reqMem
	used  int
	nvals int
}

// reqMem is the memory of one request that outlives the reuse of its
// Verdict: the context the handler gets, the hashed keys the limiters get
// (they may keep them) and the header values the response gets (net/http
// writes them after the middleware returns). One allocation per request,
// sized for a route of one or two policies; more takes more.
type reqMem struct {
	ctx  verdictCtx
	vals [memVals]string
	text [memText]byte
}

const (
	// memVals are the computed header values of one policy's allowed or
	// denied response (RateLimit, the legacy remaining and reset,
	// Retry-After); the constant ones (RateLimit-Policy, X-RateLimit-Limit,
	// Content-Type) are shared by every request.
	memVals = 4
	// memText is room for a hashed key and the RateLimit value of one
	// policy, with its legacy fields.
	memText = 64
)

// Header returns the header fields to send, in order. On an allowed
// request each of them replaces a field of the same name the handler set.
// The slice is valid until Release; the values in it, for good.
func (v *Verdict) Header() []Field {
	if v.more != nil {
		return v.more
	}
	return v.fields[:v.n]
}

// Values returns the value of Header()[i] as a one-element slice, for a
// net/http header map to hold without an allocation of its own. The slice
// is the request's, never reused, so a response may keep it after Release;
// do not append to it or change it.
func (v *Verdict) Values(i int) []string {
	if v.more == nil && i < v.n {
		return v.fvals[i]
	}
	return []string{v.Header()[i].Value}
}

// add appends a field whose value is vals[0]: a one-element slice that
// belongs to the request or is shared by every request (never changed).
func (v *Verdict) add(name string, vals []string) {
	if v.more == nil && v.n < len(v.fields) {
		v.fields[v.n] = Field{name, vals[0]}
		v.fvals[v.n] = vals
		v.n++
		return
	}
	if v.more == nil {
		v.more = append(make([]Field, 0, 2*len(v.fields)), v.fields[:v.n]...)
	}
	v.more = append(v.more, Field{name, vals[0]})
}

// addValue is add for a value that needs a slice of its own.
func (v *Verdict) addValue(name, value string) { v.add(name, v.valsOf(value)) }

// valsOf returns s as a one-element slice in the request's memory.
func (v *Verdict) valsOf(s string) []string {
	if m := v.mem; m != nil && v.nvals < len(m.vals) {
		i := v.nvals
		v.nvals++
		m.vals[i] = s
		return m.vals[i : i+1 : i+1]
	}
	return []string{s}
}

// text returns an empty buffer in the request's memory to append to. A
// buffer that outgrows it moves to memory of its own; either way, once
// kept, the bytes are never written again.
func (v *Verdict) text() []byte {
	if m := v.mem; m != nil {
		return m.text[v.used:v.used:memText]
	}
	return nil
}

// keep makes b, appended to a buffer from text, a string of the request's
// memory, and takes its room.
func (v *Verdict) keep(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if m := v.mem; m != nil && v.used+len(b) <= memText && unsafe.SliceData(b) == &m.text[v.used] {
		v.used += len(b)
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// shared values, the same for every request.
var (
	problemJSONVals = []string{contentTypeProblemJSON}
)

// unguarded is the Verdict of every request no policy covers: allowed, no
// headers. Shared, so callers must treat Verdicts as read-only.
var unguarded = &Verdict{Allowed: true}

// newVerdict returns a Verdict with room for n policies.
func newVerdict(n int) *Verdict {
	v := &Verdict{}
	if n > 0 {
		v.slots = make([]slot, n)
		v.decBuf = make([]Decision, n)
		v.budgets = make([]budgetCtx, n)
	}
	return v
}

// maxPooledBody bounds the body buffer a reused Verdict keeps.
const maxPooledBody = 4096

// Release hands v back to the engine for a later request, once the
// response is written and Finish has run. The caller must not use v, nor
// what Decisions, Body and Header returned, afterwards; the header values
// themselves stay valid. A Verdict a handler looked up (FromContext), or
// whose store calls started a timer, is left to the garbage collector
// instead of being reused. Releasing the unguarded Verdict, a 400 or a
// 403, or a Verdict twice, does nothing.
func (v *Verdict) Release() {
	p := v.pool
	if p == nil {
		return
	}
	v.pool = nil
	if m := v.mem; m != nil && m.ctx.v != nil && !m.ctx.state.CompareAndSwap(ctxLive, ctxReleased) {
		return // the handler holds it
	}
	for i := range v.budgets {
		if v.budgets[i].wasStarted() {
			return // something may still hold the budget's real context
		}
	}
	clear(v.slots)
	clear(v.decBuf)
	clear(v.fields[:v.n])
	clear(v.fvals[:v.n])
	body := v.bodyBuf[:0]
	if cap(body) > maxPooledBody {
		body = nil
	}
	// Every other field back to its zero value, one by one: fields and
	// fvals beyond n are zero already (add fills them in order), so
	// zeroing the whole Verdict would clear ~600 bytes where a request
	// used a few. TestReleaseClearsEverything checks that nothing is left.
	v.Allowed, v.Status, v.Route, v.Decisions, v.Body = false, 0, "", nil, nil
	v.n, v.more, v.finish, v.mem, v.used, v.nvals = 0, nil, nil, nil, 0, 0
	v.bodyBuf = body
	p.Put(v)
}
