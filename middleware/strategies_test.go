package middleware_test

// The tests parse policy files that name all three strategies; parsing
// them needs their packages registered.
import (
	_ "github.com/edgelimit/edgelimit/durablecounter"
	_ "github.com/edgelimit/edgelimit/kvbucket"
	_ "github.com/edgelimit/edgelimit/signedwindow"
)
