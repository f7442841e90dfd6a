package edgelimit_test

// The engine's tests parse policy files naming these strategies; importing
// their packages registers them (their limiters are the tests' own).
import (
	_ "github.com/edgelimit/edgelimit/durablecounter"
	_ "github.com/edgelimit/edgelimit/kvbucket"
	_ "github.com/edgelimit/edgelimit/signedwindow"
)
