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
