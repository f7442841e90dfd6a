package edgelimit

// Internals the external tests reach.
var (
	CanonicalPath = canonicalPath
	TemplatePath  = templatePath
)
