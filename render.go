package edgelimit

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/edgelimit/edgelimit/internal/jsonenc"
)

// problemBody is an RFC 9457 problem details body as edgelimit sends it, without
// the extension members a limiter may add (Decision.Response).
type problemBody struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	RetryAfter       int64    `json:"retry-after,omitempty"`
}

func badRequest(v *Verdict, detail string) {
	v.Allowed = false
	v.Status = 400
	v.setBody(appendProblem(v.bodyBuf[:0], &problemBody{Type: problemBadRequest, Title: titleBadRequest, Status: 400, Detail: detail}, nil, nil))
	v.add(headerContentType, problemJSONVals)
}

// forbidden makes v the 403 of a deny list. The body names neither the
// list nor the entry that matched: a client learns only that it is refused.
func forbidden(v *Verdict) {
	v.Allowed = false
	v.Status = 403
	v.setBody(appendProblem(v.bodyBuf[:0], &problemBody{Type: problemBadRequest, Title: titleForbidden, Status: 403, Detail: "This client may not use this resource."}, nil, nil))
	v.add(headerContentType, problemJSONVals)
}

// setBody makes b the problem body; its buffer is kept for the next
// request of a reused Verdict.
func (v *Verdict) setBody(b []byte) {
	v.Body, v.bodyBuf = b, b
}

// listed reports whether a policy's decision is shown to the client: it was
// decided (or peeked) and the policy is not a shadow.
func listed(c member, s *slot) bool { return !c.Shadow && s.o != notEvaluated }

// render turns the route's decisions into the Verdict: its Decisions, the
// RateLimit fields of every listed policy, and, when a policy denied (or
// failed closed), the status, Retry-After and problem body.
func (e *Engine) render(rs *routeSet, v *Verdict, slots []slot) {
	blocked, violated := false, 0
	all, defaults := true, true
	n := 0
	for _, c := range rs.policies {
		s := &slots[c.slot]
		if c.Shadow {
			continue
		}
		if s.o == notEvaluated {
			all = false
			continue
		}
		n++
		if s.o == denied || s.o == failedClosed {
			blocked = true
		}
		if s.o == denied {
			violated++
		}
		if s.d.Limit != c.q || s.d.Window != c.w {
			defaults = false
		}
	}
	if n <= len(v.decBuf) {
		v.Decisions = v.decBuf[:0:n]
	} else {
		v.Decisions = make([]Decision, 0, n)
	}
	for _, c := range rs.policies {
		if s := &slots[c.slot]; listed(c, s) {
			v.Decisions = append(v.Decisions, s.d)
		}
	}

	// Every computed header value is appended to one buffer in the
	// request's memory, which becomes the string the values are sliced
	// from: no allocation unless they outgrow it. That memory is never
	// written again, so the string never changes, and never reused, so a
	// response may keep it.
	buf := v.text()
	var policyEnd int
	if !all || !defaults {
		for _, c := range rs.policies {
			if s := &slots[c.slot]; listed(c, s) {
				buf = appendListSep(buf)
				if s.d.Limit == c.q && s.d.Window == c.w {
					buf = append(buf, c.item...)
				} else {
					buf = strconv.AppendQuote(buf, c.Name)
					buf = appendPolicyParams(buf, s.d.Limit, s.d.Window)
				}
			}
		}
		policyEnd = len(buf)
	}
	rlStart := len(buf)
	var legacy *Decision
	var legacyC *compiled
	var retry time.Duration
	// The legacy remaining and reset repeat the RateLimit member of the
	// decision they come from (r and t): its digits are sliced again
	// rather than written twice.
	var rSpan, tSpan, legR, legT [2]int
	for _, c := range rs.policies {
		s := &slots[c.slot]
		if !listed(c, s) {
			continue
		}
		d := &s.d
		if len(buf) > rlStart {
			buf = append(buf, ", "...)
		}
		buf, rSpan, tSpan = appendLimitItemSpans(buf, c.rItem, d.Remaining, d.Reset)
		if legacy == nil || d.Remaining < legacy.Remaining || d.Remaining == legacy.Remaining && d.Reset > legacy.Reset {
			legacy, legacyC, legR, legT = d, c.compiled, rSpan, tSpan
		}
		if s.o == denied || s.o == failedClosed {
			retry = max(retry, d.RetryAfter, d.Reset)
		}
	}
	rlEnd := len(buf)
	var limSpan, remSpan, resetSpan, retrySpan [2]int
	if e.legacy && legacy != nil {
		if legacy.Limit != legacyC.q {
			limSpan[0] = len(buf)
			buf = strconv.AppendInt(buf, max(legacy.Limit, 0), 10)
			limSpan[1] = len(buf)
		}
		remSpan = legR
		if resetSpan = legT; resetSpan[1] == 0 { // no t: a reset of 0
			resetSpan[0] = len(buf)
			buf = strconv.AppendInt(buf, seconds(legacy.Reset), 10)
			resetSpan[1] = len(buf)
		}
	}
	var secs int64
	if blocked {
		secs = retryAfterSeconds(retry)
		if resetSpan[1] > 0 && legacy != nil && seconds(legacy.Reset) == secs {
			retrySpan = resetSpan
		} else if legT[1] > 0 && seconds(legacy.Reset) == secs {
			retrySpan = legT
		} else {
			retrySpan[0] = len(buf)
			buf = strconv.AppendInt(buf, secs, 10)
			retrySpan[1] = len(buf)
		}
	}
	vals := v.keep(buf)
	switch {
	case all && defaults && rs.policyHeader != "":
		v.add(headerRateLimitPolicy, rs.policyVals)
	case policyEnd > 0:
		v.addValue(headerRateLimitPolicy, vals[:policyEnd])
	}
	if rlEnd > rlStart {
		v.addValue(headerRateLimit, vals[rlStart:rlEnd])
	}
	if e.legacy && legacy != nil {
		if limSpan[1] == 0 {
			v.add(headerLegacyLimit, legacyC.limitVals)
		} else {
			v.addValue(headerLegacyLimit, vals[limSpan[0]:limSpan[1]])
		}
		v.addValue(headerLegacyRemaining, vals[remSpan[0]:remSpan[1]])
		v.addValue(headerLegacyReset, vals[resetSpan[0]:resetSpan[1]])
	}
	// The limiters' own fields: those of the decisions that let the request
	// through, or of those that denied it (a refunded decision's are
	// dropped: its state was not spent).
	want := allowed
	if blocked {
		want = denied
	}
	// A denial that work lifts (a proof-of-work challenge: no wait of its
	// own) is pointless beside one that only time lifts: the client would
	// solve for nothing, then wait anyway. Its fields and problem members
	// are left out; the policy is still named as violated.
	hard := false
	for _, c := range rs.policies {
		if s := &slots[c.slot]; !c.Shadow && (s.o == denied && s.d.RetryAfter > 0 || s.o == failedClosed) {
			hard = true
		}
	}
	addDecisionFields(v, rs, slots, want, hard)
	if !blocked {
		v.Allowed = true
		return
	}
	v.Allowed = false
	v.addValue(headerRetryAfter, vals[retrySpan[0]:retrySpan[1]])
	v.add(headerContentType, problemJSONVals)
	var namesBuf [8]string
	names := namesBuf[:0]
	var detail [512]byte // a ban's detail included
	if violated == 0 {
		v.Status = 503
		for _, c := range rs.policies {
			if s := &slots[c.slot]; !c.Shadow && s.o == failedClosed {
				names = append(names, c.Name)
			}
		}
		d := append(detail[:0], "The rate-limit store is unavailable and this endpoint fails closed. Retry in "...)
		d = appendPlural(d, secs, "second")
		d = append(d, '.')
		v.setBody(appendProblem(v.bodyBuf[:0], &problemBody{Type: problemReducedCapacity, Title: titleReducedCapacity, Status: 503,
			ViolatedPolicies: names, RetryAfter: secs}, d, nil))
		return
	}
	v.Status = 429
	var extBuf [4]*Response
	ext := extBuf[:0]
	var one *compiled // the violated policy, when only one is and it adds nothing
	plain := true
	for _, c := range rs.policies {
		if s := &slots[c.slot]; !c.Shadow && s.o == denied {
			names = append(names, c.Name)
			one = c.compiled
			if r := s.d.Response; r != nil && !lifted(hard, s) && (r.Extension != "" || r.Detail != "") {
				plain = false
			}
			if r := s.d.Response; r != nil && r.Extension != "" && !lifted(hard, s) {
				ext = append(ext, r)
			}
		}
	}
	if len(names) == 1 && plain {
		// The common 429: one policy, nothing of the limiter's to add. Its
		// body is the policy's precomputed head, the wait, and its name:
		// byte for byte what appendProblem writes (TestDenialBodyFastPath).
		b := append(v.bodyBuf[:0], one.denyHead...)
		b = appendPlural(b, secs, "second")
		b = append(b, `.","violated-policies":[`...)
		b = append(b, one.jsonName...)
		b = append(b, `],"retry-after":`...)
		b = strconv.AppendInt(b, secs, 10)
		v.setBody(append(b, '}'))
		return
	}
	d := append(detail[:0], "Quota exceeded for "...)
	d = appendQuoteList(d, names)
	d = append(d, ". Retry in "...)
	d = appendPlural(d, secs, "second")
	d = append(d, '.')
	for _, c := range rs.policies {
		s := &slots[c.slot]
		if r := s.d.Response; !c.Shadow && s.o == denied && r != nil && r.Detail != "" && !lifted(hard, s) && !strings.Contains(unsafe.String(&d[0], len(d)), r.Detail) {
			d = append(d, ' ')
			d = append(d, r.Detail...)
		}
	}
	v.setBody(appendProblem(v.bodyBuf[:0], &problemBody{Type: problemQuotaExceeded, Title: titleQuotaExceeded, Status: 429,
		ViolatedPolicies: names, RetryAfter: secs}, d, ext))
}

// denyHead is the start of the 429 body of a request that only the
// policy named name denies, up to the wait in its detail.
func denyHead(name string) string {
	b := appendProblem(nil, &problemBody{Type: problemQuotaExceeded, Title: titleQuotaExceeded, Status: 429}, []byte{}, nil)
	b = append(b[:len(b)-1], `,"detail":`...)
	d := jsonenc.AppendString(nil, "Quota exceeded for "+string(appendQuoteList(nil, []string{name}))+". Retry in ")
	return string(append(b, d[:len(d)-1]...)) // without the closing quote
}

// lifted reports a denial that work lifts (a challenge, no wait of its
// own) beside a hard one (hard: a denial only time lifts, or a store that
// failed closed): its fields and problem members are left out.
//
// It is a plain function, not a closure handed to addDecisionFields: a
// func-typed parameter called with a pointer into slots made the escape
// analysis move the request's slots (Engine.Decide's stack buffer) to the
// heap, about 5 KB a request.
func lifted(hard bool, s *slot) bool {
	return hard && s.o == denied && s.d.RetryAfter == 0 && s.d.Response != nil
}

// addDecisionFields adds the header fields of the listed decisions whose
// outcome is want, except those lifted beside a hard denial; fields of one
// name from several policies are joined into one list value, in policy
// order.
func addDecisionFields(v *Verdict, rs *routeSet, slots []slot, want outcome, hard bool) {
	field := func(c member) Field {
		s := &slots[c.slot]
		if c.Shadow || s.o != want || s.d.Response == nil || lifted(hard, s) {
			return Field{}
		}
		return s.d.Response.Field
	}
	for i, c := range rs.policies {
		f := field(c)
		if f.Name == "" {
			continue
		}
		dup := false
		for _, p := range rs.policies[:i] {
			dup = dup || equalFoldASCII(field(p).Name, f.Name) // joined with the earlier policy's
		}
		if dup {
			continue
		}
		value := f.Value
		for _, q := range rs.policies[i+1:] {
			if g := field(q); equalFoldASCII(g.Name, f.Name) {
				value += ", " + g.Value
			}
		}
		v.addValue(f.Name, value)
	}
}

// equalFoldASCII compares header names, which are ASCII tokens, ignoring
// case.
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// appendQuoteList appends `policy "a"` or `policies "a", "b"`.
func appendQuoteList(b []byte, names []string) []byte {
	if len(names) == 1 {
		return strconv.AppendQuote(append(b, "policy "...), names[0])
	}
	b = append(b, "policies "...)
	for i, n := range names {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, n)
	}
	return b
}

// appendPlural appends "1 second" or "n seconds".
func appendPlural(b []byte, n int64, unit string) []byte {
	b = strconv.AppendInt(b, n, 10)
	b = append(b, ' ')
	b = append(b, unit...)
	if n != 1 {
		b = append(b, 's')
	}
	return b
}

// problemMembers are the members the engine writes itself; an extension
// cannot replace them.
var problemMembers = []string{"type", "title", "status", "detail", "violated-policies", "retry-after"}

// appendProblem appends p as JSON, byte for byte what encoding/json writes
// for it (same field order, omitempty and escaping), without reflection.
// detail, if not nil, is used in place of p.Detail. exts are JSON objects
// whose members follow, in order (each Response's Extension); a member
// already written is skipped, as is an extension that is not a JSON object.
func appendProblem(b []byte, p *problemBody, detail []byte, exts []*Response) []byte {
	b = append(b, `{"type":`...)
	b = jsonenc.AppendString(b, p.Type)
	b = append(b, `,"title":`...)
	b = jsonenc.AppendString(b, p.Title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(p.Status), 10)
	if detail != nil {
		if len(detail) > 0 {
			b = append(b, `,"detail":`...)
			b = jsonenc.AppendString(b, detail)
		}
	} else if p.Detail != "" {
		b = append(b, `,"detail":`...)
		b = jsonenc.AppendString(b, p.Detail)
	}
	if len(p.ViolatedPolicies) > 0 {
		b = append(b, `,"violated-policies":[`...)
		for i, n := range p.ViolatedPolicies {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.AppendString(b, n)
		}
		b = append(b, ']')
	}
	if p.RetryAfter != 0 {
		b = append(b, `,"retry-after":`...)
		b = strconv.AppendInt(b, p.RetryAfter, 10)
	}
	if len(exts) > 0 {
		w := extWriter{b: b}
		for _, r := range exts {
			if r.members != nil {
				for _, m := range r.members {
					w.add(m.name, m.raw)
				}
				continue
			}
			w.ext(r.Extension)
		}
		b = w.b
	}
	return append(b, '}')
}

// extMember is one member of a JSON object: its name and its value's
// JSON text, compact.
type extMember struct{ name, raw string }

// extWriter appends extension members to a problem body, each name once:
// a member whose name was written (the engine's own, an earlier
// extension's) is skipped.
// The names seen are held in the writer itself, not in a slice of it, so
// that a writer on the stack stays there.
type extWriter struct {
	b     []byte
	seen  [10]string
	nseen int
	more  []string // beyond seen
}

func (w *extWriter) add(name, raw string) {
	for _, s := range problemMembers {
		if s == name {
			return
		}
	}
	for _, s := range w.seen[:w.nseen] {
		if s == name {
			return
		}
	}
	for _, s := range w.more {
		if s == name {
			return
		}
	}
	if w.nseen < len(w.seen) {
		w.seen[w.nseen] = name
		w.nseen++
	} else {
		w.more = append(w.more, name)
	}
	w.b = append(w.b, ',')
	w.b = jsonenc.AppendString(w.b, name)
	w.b = append(w.b, ':')
	w.b = append(w.b, raw...)
}

// ext appends the members of ext. An extension in the compact form the
// engine's own limiters write (a challenge: on every 429 of a flood) is
// split without a decoder; any other goes through encoding/json's. A ban's
// members come split already (Response.members, by banResponse), so that
// a banned key's 429 parses nothing.
func (w *extWriter) ext(ext string) {
	var buf [4]extMember
	if ms, ok := compactMembers(ext, buf[:0]); ok {
		for _, m := range ms {
			w.add(m.name, m.raw)
		}
		return
	}
	dec := json.NewDecoder(strings.NewReader(ext))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return
	}
	for dec.More() {
		tok, err := dec.Token()
		name, ok := tok.(string)
		if err != nil || !ok {
			break
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		var c bytes.Buffer
		if json.Compact(&c, raw) == nil {
			raw = c.Bytes()
		}
		w.add(name, string(raw))
	}
}

// appendExtensions appends the members of each JSON object in exts, as
// appendProblem does for its Responses' Extensions.
func appendExtensions(b []byte, exts []string) []byte {
	w := extWriter{b: b}
	for _, ext := range exts {
		w.ext(ext)
	}
	return w.b
}

// compactMembers appends to ms each member of ext, a JSON object with no
// space outside its strings and no escape in its member names, and
// reports true; for anything else it appends none and reports false.
// (A name of printable ASCII: the decoder would rewrite any other.)
func compactMembers(ext string, ms []extMember) ([]extMember, bool) {
	n := len(ms)
	if len(ext) < 2 || ext[0] != '{' || !json.Valid([]byte(ext)) {
		return ms, false
	}
	// Valid JSON: only the layout is left to check.
	i := 1
	for ext[i] != '}' {
		if ext[i] != '"' {
			return ms[:n], false
		}
		j := strings.IndexByte(ext[i+1:], '"') + i + 1
		name := ext[i+1 : j]
		if !plainName(name) || ext[j+1] != ':' {
			return ms[:n], false
		}
		end, ok := skipCompactValue(ext, j+2)
		if !ok {
			return ms[:n], false
		}
		ms = append(ms, extMember{name, ext[j+2 : end]})
		i = end
		if ext[i] == ',' {
			i++
		}
	}
	if i != len(ext)-1 {
		return ms[:n], false
	}
	return ms, true
}

// plainName reports a member name of printable ASCII without escapes,
// which the decoder would read as it is.
func plainName(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e || s[i] == '\\' {
			return false
		}
	}
	return true
}

// skipCompactValue returns the end of the valid JSON value at s[i:], and
// false if it has space outside its strings.
func skipCompactValue(s string, i int) (int, bool) {
	depth := 0
	for ; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			for i++; s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i, true
			}
			depth--
		case ',':
			if depth == 0 {
				return i, true
			}
		case ' ', '\t', '\n', '\r':
			return 0, false
		}
		if depth == 0 && (s[i] == '"' || s[i] == '}' || s[i] == ']') {
			return i + 1, true
		}
	}
	return i, true
}
