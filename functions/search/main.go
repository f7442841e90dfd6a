// Command search is the example Lambda function for a CPU-heavy search (durable gcra per client address, fail open).
//
// Its policies are embedded: functions/handlers/policies/search.yaml. It reads
// the rest of its configuration from the environment (see setup.FromEnv and
// template.yaml), builds the engine once, before the first invocation, and
// serves API Gateway HTTP API events through the rate-limit middleware.
//
//	make build   # build/arm64/search/bootstrap and build/amd64/search/bootstrap
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
	fn := handlers.Search
	env, err := setup.FromEnv(context.Background(), setup.EnvConfig{Policies: fn.Policies, PolicyFile: fn.PolicyFile})
	if err != nil {
		// Lambda reports the exit as Runtime.ExitError and retries the
		// init on the next request; the reason is in the function's logs.
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("edgelimit: init failed", "function", fn.Name, "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(middleware.HTTPAPI(env.Engine, fn.New(handlers.Deps{Logger: env.Logger})))
}
