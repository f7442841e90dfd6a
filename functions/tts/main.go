// Command tts is the example Lambda function for an expensive downstream call (signed window tokens and proof of work, no storage).
// Its policies are embedded (functions/handlers/policies/tts.yaml); the
// rest of its configuration is its environment (see setup.FromEnv and
// template.yaml).
//
//	make build   # build/arm64/tts/bootstrap and build/amd64/tts/bootstrap
package main

import (
	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/functions/internal/lambdafn"
	"github.com/edgelimit/edgelimit/setup/signed"
)

func main() { lambdafn.Run(handlers.TTS, signed.Backend()) }
