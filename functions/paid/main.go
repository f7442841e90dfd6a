// Command paid is the example Lambda function for an API-key metered endpoint (durable: 10/s, 1,000/day and 20,000 a month from the billing day per API key, fail closed).
// Its policies are embedded (functions/handlers/policies/paid.yaml); the
// rest of its configuration is its environment (see setup.FromEnv and
// template.yaml).
//
//	make build   # build/arm64/paid/bootstrap and build/amd64/paid/bootstrap
package main

import (
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/functions/internal/lambdafn"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
)

// Its policies are fixed-window and gcra, with overrides and bans: the
// backend links those algorithms and the override and ban stores, and
// nothing else of the durable strategy (durable.Counters).
func main() {
	lambdafn.Run(handlers.Paid, durable.CountersWithOverridesAndBans(dynamodb.Config{},
		durablecounter.FixedWindowCode, durablecounter.GCRACode))
}
