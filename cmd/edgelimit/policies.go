package main

import _ "embed"

// examplePolicies is policies.yaml, the example policies of every strategy,
// embedded so that `edgelimit serve` runs with no file at all. It lives
// here, not in the root package, so that no program importing edgelimit
// carries it.
//
//go:embed policies.yaml
var examplePolicies []byte
