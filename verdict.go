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
	fields [6]Field
	n      int
	more   []Field
	// decBuf, allocated with the Verdict, backs Decisions.
	decBuf []Decision
	// finish is what Finish needs, for a route with work after the
	// response; nil otherwise.
	finish *finishState
}

// Header returns the header fields to send, in order. On an allowed
// request each of them replaces a field of the same name the handler set.
func (v *Verdict) Header() []Field {
	if v.more != nil {
		return v.more
	}
	return v.fields[:v.n]
}

func (v *Verdict) add(name, value string) {
	if v.more == nil && v.n < len(v.fields) {
		v.fields[v.n] = Field{name, value}
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

// newVerdict allocates a Verdict together with room for n Decisions, in
// one allocation, for routes of up to 16 policies.
func newVerdict(n int) *Verdict {
	switch {
	case n <= 1:
		return verdictWith(func(d *[1]Decision) []Decision { return d[:] })
	case n <= 2:
		return verdictWith(func(d *[2]Decision) []Decision { return d[:] })
	case n <= 4:
		return verdictWith(func(d *[4]Decision) []Decision { return d[:] })
	case n <= 8:
		return verdictWith(func(d *[8]Decision) []Decision { return d[:] })
	case n <= 16:
		return verdictWith(func(d *[16]Decision) []Decision { return d[:] })
	}
	return &Verdict{}
}

func verdictWith[A any](slice func(*A) []Decision) *Verdict {
	b := new(struct {
		v Verdict
		d A
	})
	b.v.decBuf = slice(&b.d)
	return &b.v
}
