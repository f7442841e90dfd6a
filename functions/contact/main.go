// Command contact is the example Lambda function for a contact form (kv: 5/min per address, fail open) and a demo login (durable: 5 failed logins per 15 min per address, only 401 and 403 charged).
// Its policies are embedded (functions/handlers/policies/contact.yaml); the
// rest of its configuration is its environment (see setup.FromEnv and
// template.yaml).
//
//	make build   # build/arm64/contact/bootstrap and build/amd64/contact/bootstrap
package main

import (
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/functions/internal/lambdafn"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/dynamodb/kv"
)

func main() {
	// A kv policy and a fixed-window durable one, neither with overrides or
	// a ban: the backends link nothing else (kv.Buckets, durable.Counters).
	lambdafn.Run(handlers.Contact, kv.Buckets(dynamodb.Config{}),
		durable.Counters(dynamodb.Config{}, durablecounter.FixedWindowCode))
}
