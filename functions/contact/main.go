// Command contact is the example Lambda function for a contact form (kv: 5/min per address, fail open).
// Its policies are embedded (functions/handlers/policies/contact.yaml); the
// rest of its configuration is its environment (see setup.FromEnv and
// template.yaml).
//
//	make build   # build/arm64/contact/bootstrap and build/amd64/contact/bootstrap
package main

import (
	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/functions/internal/lambdafn"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/kv"
)

func main() { lambdafn.Run(handlers.Contact, kv.Backend(dynamodb.Config{})) }
