// Package e2e holds the end-to-end tests of the example Lambda functions
// (functions/) and of the deployment that runs them (template.yaml,
// mk/lambda.mk). It has no code of its own: everything is in its tests.
//
// The function tests build each function exactly as it is deployed (a
// static, stripped bootstrap with -tags
// lambda.norpc,nethttpomithttp2,edgelimit.noyaml,edgelimit.nopowgate), for
// this machine, and
// run it for real under the AWS Lambda Runtime Interface Emulator, invoking
// it one request at a time with API Gateway HTTP API (payload 2.0) events,
// as API Gateway would. Durable and kv functions keep their state in
// dynalite, started by internal/tools/testservers (which `make test` and
// `make e2e` use). The emulator is installed with `go install` at a pinned
// version into .tools/bin when it is not there yet; where that is
// impossible the tests skip, except in CI (CI=true), where they fail.
//
// The template tests check that template.yaml matches the code: every
// environment variable the functions read is set (and the key ring only
// where it is used), the routes are the ones the policy files guard, each
// function may call exactly the DynamoDB actions its strategies' narrow
// SDK interfaces declare, on the one table, and cfn-lint passes.
//
// The secret tests start `edgelimit serve` (built once) and the tts function
// with malformed EDGELIMIT_SECRETS and EDGELIMIT_HASH_KEY values
// (internal/leaktest) and check that no output shows a trace of a secret.
// TestNginxBurstIsEdgelimitBurstMinusOne runs Debian's nginx (installed by
// .ci/run; the test skips without it except in CI) beside `edgelimit serve`
// and pins how gcra's burst maps to limit_req's.
//
// TestServeTokenVerifiesWithJose verifies a token that `edgelimit serve`
// issued over HTTP with jose under Node, with docs/signed.md's example
// (signedwindow/testdata/verify_jose.mjs).
//
// TestMakeRunStops runs the quick start's `make run` on a free port as a
// user does, and checks that Ctrl-C (SIGINT to the process group), `kill`
// of make alone and `kill -9` of make each leave nothing listening.
// TestMakeRunLambda runs `make run-lambda` (examples/lambda under the
// emulator, its table on a dynalite of its own), invokes it with the
// README's event until the policy refuses, and stops it by Ctrl-C and by
// `kill` of make: the emulator, the function and dynalite all go.
//
// TestDocPrograms builds the README's programs and docs/handlers.md's in a
// module outside the repository and runs them; TestExamplesAreTheREADMEs
// checks that examples/ holds the README's; TestInstallSteps runs the
// README's install steps for a clone; TestShapingExcerpts checks
// docs/shaping.md's policy excerpts against the files they name.
//
// TestTreeHoldsSourcesOnly checks that `git ls-files` holds no compiled
// executable and no file over 1 MB, and TestBuildOutputsAreIgnored that
// what go build and make write is ignored (both skip outside a git
// checkout).
//
// TestColdStart measures each bootstrap's size and the emulator's Init
// Duration (median of several cold starts); `make cold-start` prints the
// table that docs/deploy.md shows.
package e2e
