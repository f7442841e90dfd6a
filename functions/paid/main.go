// Command paid is the example Lambda function for an API-key metered endpoint (durable: 10/s and 1,000/day per API key, fail closed).
//
// Its policies are embedded: functions/handlers/policies/paid.yaml. It reads
// the rest of its configuration from the environment (see setup.FromEnv and
// template.yaml), builds the engine once, before the first invocation, and
// serves API Gateway HTTP API events through the rate-limit middleware.
//
//	make build   # build/arm64/paid/bootstrap and build/amd64/paid/bootstrap
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/setup"
)

func main() {
	fn := handlers.Paid
	env, err := setup.FromEnv(context.Background(), setup.EnvConfig{Policies: fn.Policies, PolicyFile: fn.PolicyFile})
	if err != nil {
		// Lambda reports the exit as Runtime.ExitError and retries the
		// init on the next request; the reason is in the function's logs.
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("edgelimit: init failed", "function", fn.Name, "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(middleware.HTTPAPI(env.Engine, fn.New(handlers.Deps{Logger: env.Logger})))
}
