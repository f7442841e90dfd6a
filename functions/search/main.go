// Command search is the example Lambda function for a CPU-heavy search (durable gcra per address, local fallback).
// Its policies are embedded (functions/handlers/policies/search.yaml); the
// rest of its configuration is its environment (see setup.FromEnv and
// template.yaml).
//
//	make build   # build/arm64/search/bootstrap and build/amd64/search/bootstrap
package main

import (
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/functions/internal/lambdafn"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
)

// Its policy is gcra with on_store_error: local: the backend links that
// algorithm and the Memory store of the in-process twin, and nothing else
// of the durable strategy (durable.Counters).
func main() {
	lambdafn.Run(handlers.Search, durable.Counters(dynamodb.Config{}, durablecounter.GCRACode, durablecounter.MemoryCode))
}
