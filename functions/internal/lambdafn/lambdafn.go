// Package lambdafn is the one main of the example functions: it builds the
// function's engine from its environment once, before the first
// invocation, and serves API Gateway HTTP API events through the rate-limit
// middleware. Each functions/<name>/main.go names its handler and the
// backends of the strategies its policy file uses, and so links nothing
// else. The secrets come from Secrets Manager at start-up when
// EDGELIMIT_SECRET_ID names one (template.yaml), else from the environment.
package lambdafn

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/secretsmanager"
)

// Run serves fn with its policy file compiled at build time (fn.Tree,
// setup.FromEnvCompiled: no YAML parser is linked, and a replacement file
// in EDGELIMIT_POLICY_FILE is read as JSON) and the given backends; it
// returns only if the environment is wrong, after logging why, by exiting:
// Lambda reports the exit as Runtime.ExitError and retries the init on the
// next request, and the reason is in the function's logs.
func Run(fn handlers.Function, backends ...setup.Backend) {
	env, err := setup.FromEnvCompiled(context.Background(), setup.EnvConfig{
		Tree: fn.Tree(), PolicyFile: fn.PolicyFile, Backends: backends, Secrets: secretsmanager.Source(),
	})
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("edgelimit: init failed", "function", fn.Name, "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(middleware.HTTPAPI(env.Engine, fn.New(handlers.Deps{Logger: env.Logger})))
}
