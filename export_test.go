package edgelimit

import "github.com/edgelimit/edgelimit/internal/urlpath"

// Internals the external tests reach.
var (
	CanonicalPath = urlpath.Canonical
	TemplatePath  = templatePath
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
