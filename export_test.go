package edgelimit

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/edgelimit/edgelimit/internal/jsonenc"
	"github.com/edgelimit/edgelimit/internal/urlpath"
)

// Internals the external tests reach.
var (
	CanonicalPath = urlpath.Canonical
	TemplatePath  = templatePath
	SleepTimer    = sleepTimer
)

// AbilitiesOf is abilitiesOf, for the test that every strategy declares
// what its limiters do.
var AbilitiesOf = abilitiesOf

// Reused reports whether Release put v back for reuse: a later Decide of
// its route may return it. v must be released and its route's pool not
// used since.
func Reused(e *Engine, v *Verdict) bool {
	rs := e.match("GET", "/v", "")
	got, _ := rs.verdicts.Get().(*Verdict)
	return got == v
}

// ReleasedClean takes the Verdict Release put back for route "GET /v"
// and reports what it still holds besides its reusable buffers (empty:
// nothing), as a fresh Verdict would not.
func ReleasedClean(e *Engine) string {
	rs := e.match("GET", "/v", "")
	got, _ := rs.verdicts.Get().(*Verdict)
	if got == nil {
		return "nothing was put back"
	}
	want := Verdict{slots: got.slots, decBuf: got.decBuf, budgets: got.budgets, bodyBuf: got.bodyBuf[:0]}
	switch {
	case !reflect.DeepEqual(*got, want):
		return fmt.Sprintf("%+v", *got)
	case len(got.bodyBuf) != 0:
		return "a body"
	}
	for i := range got.slots {
		if !reflect.DeepEqual(got.slots[i], slot{}) || !reflect.DeepEqual(got.decBuf[i], Decision{}) {
			return fmt.Sprintf("slot %d: %+v, %+v", i, got.slots[i], got.decBuf[i])
		}
	}
	return ""
}

// DenialBodies returns the 429 body the fast path writes for a request
// only policy name denies with a wait of secs, and the general one.
func DenialBodies(name string, secs int64) (fast, general string) {
	b := append([]byte(denyHead(name)), appendPlural(nil, secs, "second")...)
	b = append(b, `.","violated-policies":[`...)
	b = jsonenc.AppendString(b, name)
	b = append(b, `],"retry-after":`...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, '}')
	d := append([]byte("Quota exceeded for "), appendQuoteList(nil, []string{name})...)
	d = append(d, ". Retry in "...)
	d = appendPlural(d, secs, "second")
	d = append(d, '.')
	g := appendProblem(nil, &problemBody{Type: problemQuotaExceeded, Title: titleQuotaExceeded, Status: 429,
		ViolatedPolicies: []string{name}, RetryAfter: secs}, d, nil)
	return string(b), string(g)
}
