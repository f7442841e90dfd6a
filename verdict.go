package edgelimit

// Verdict is the engine's answer for one request. It is read-only: Decide
// may return the same Verdict for many requests (those no policy covers).
type Verdict struct {
	// Allowed: run the handler and add Header() to its response.
	Allowed bool
	// Status is 0 when Allowed, else the status to answer with (400, 403, 429, 503).
	Status int
	// Route labels the matched policies for logs and metrics ("" if none).
	Route string
	// Decisions has one entry per policy guarding the route that was decided
	// and is not a shadow policy (shadow policies are never shown), in file
	// order. When Allowed, every such policy admitted the request.
	Decisions []Decision
	// Body is the problem+json body when !Allowed.
	Body   []byte
	fields [8]Field
	vals   [8]string // the fields' values again, for Values
	n      int
	more   []Field
	// decBuf, allocated with the Verdict, backs Decisions.
	decBuf []Decision
	// finish is what Finish needs, for a route with work after the
	// response; nil otherwise.
	finish *finishState
	// ctx is the context Context returns: the parent, answering the verdict
	// lookup, so a handler's context costs no allocation of its own.
	ctx verdictCtx
	// budgets back the time budgets of the policies' first store calls;
	// text backs the computed header values. Both live in the Verdict's
	// allocation, so that a decision from memory allocates nothing else.
	budgets []budgetCtx
	text    [textSize]byte
}

// textSize is room for the computed header values of a typical route
// (RateLimit, the legacy fields and Retry-After of up to three policies);
// longer values take an allocation of their own.
const textSize = 160

// Header returns the header fields to send, in order. On an allowed
// request each of them replaces a field of the same name the handler set.
func (v *Verdict) Header() []Field {
	if v.more != nil {
		return v.more
	}
	return v.fields[:v.n]
}

// Values returns the value of Header()[i] as a one-element slice, for a
// net/http header map to hold without an allocation of its own. The slice
// belongs to the Verdict: do not append to it or change it.
func (v *Verdict) Values(i int) []string {
	if v.more == nil && i < v.n {
		return v.vals[i : i+1 : i+1]
	}
	return []string{v.Header()[i].Value}
}

func (v *Verdict) add(name, value string) {
	if v.more == nil && v.n < len(v.fields) {
		v.fields[v.n] = Field{name, value}
		v.vals[v.n] = value
		v.n++
		return
	}
	if v.more == nil {
		v.more = append(make([]Field, 0, 2*len(v.fields)), v.fields[:v.n]...)
	}
	v.more = append(v.more, Field{name, value})
}

// unguarded is the Verdict of every request no policy covers: allowed, no
// headers. Shared, so callers must treat Verdicts as read-only.
var unguarded = &Verdict{Allowed: true}

// newVerdict allocates a Verdict together with room for n Decisions and n
// time budgets, in one allocation, for routes of up to 16 policies.
func newVerdict(n int) *Verdict {
	switch {
	case n == 0:
		return &Verdict{}
	case n <= 1:
		return verdictWith(func(d *[1]Decision, b *[1]budgetCtx) ([]Decision, []budgetCtx) { return d[:], b[:] })
	case n <= 2:
		return verdictWith(func(d *[2]Decision, b *[2]budgetCtx) ([]Decision, []budgetCtx) { return d[:], b[:] })
	case n <= 4:
		return verdictWith(func(d *[4]Decision, b *[4]budgetCtx) ([]Decision, []budgetCtx) { return d[:], b[:] })
	case n <= 8:
		return verdictWith(func(d *[8]Decision, b *[8]budgetCtx) ([]Decision, []budgetCtx) { return d[:], b[:] })
	case n <= 16:
		return verdictWith(func(d *[16]Decision, b *[16]budgetCtx) ([]Decision, []budgetCtx) { return d[:], b[:] })
	}
	return &Verdict{}
}

func verdictWith[D, B any](slices func(*D, *B) ([]Decision, []budgetCtx)) *Verdict {
	b := new(struct {
		v Verdict
		d D
		b B
	})
	b.v.decBuf, b.v.budgets = slices(&b.d, &b.b)
	return &b.v
}
