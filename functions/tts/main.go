// Command tts is the example Lambda function for an expensive downstream call (signed window tokens and proof of work, seconds of audio charged after the response, at most 2 jobs at once per client).
// Its policies are embedded (functions/handlers/policies/tts.yaml); the
// rest of its configuration is its environment (see setup.FromEnv and
// template.yaml).
//
//	make build   # build/arm64/tts/bootstrap and build/amd64/tts/bootstrap
package main

import (
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/functions/internal/lambdafn"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/dynamodb/inflight"
	"github.com/edgelimit/edgelimit/setup/signed"
)

func main() {
	// A signed, an inflight and a fixed-window durable policy, none with
	// overrides or a ban: the backends link nothing else (inflight.Slots,
	// durable.Counters).
	lambdafn.Run(handlers.TTS, signed.Backend(), inflight.Slots(dynamodb.Config{}),
		durable.Counters(dynamodb.Config{}, durablecounter.FixedWindowCode))
}
