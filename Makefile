# edgelimit — see README.md. `make run` and `make test` are the quick start.
GO        ?= go
ADDR      ?= 127.0.0.1:8080
POLICIES  ?= cmd/edgelimit/policies.yaml
RUN_BIN   ?= bin/edgelimit
# -timeout is a bound on a hung package, not a budget: on a 2-core machine
# loaded by other work (load average 20-30) durablecounter's suite passed
# 15 minutes, and the killed binary's aborted requests crashed the shared
# dynalite, failing every later test that used it.
TESTFLAGS ?= -race -shuffle=on -count=1 -timeout 30m

# staticcheck, pinned in a module of its own (internal/tools/staticcheck/go.mod)
# so that its requirements never enter the go.mod of a module that imports
# ours (a `tool` line in our go.mod would add them to every importer's
# module graph).
STATICCHECK ?= $(GO) tool -modfile=internal/tools/staticcheck/go.mod staticcheck

.PHONY: run run-lambda test deps vet lint fmt-check unit clean

## run: edgelimit serve on $(ADDR) (make run ADDR=127.0.0.1:9090 for another
## port). Ctrl-C or `kill` of make stops it. The binary is built first and
## run by make itself, not by `go run` (which passes no SIGTERM on to the
## server); --exit-with-parent stops the server even when make is killed in
## a way it cannot pass on (kill -9).
run:
	$(GO) build -o $(RUN_BIN) ./cmd/edgelimit
	$(RUN_BIN) serve --addr $(ADDR) --policies $(POLICIES) --exit-with-parent

## run-lambda: the README's Lambda program (examples/lambda; LAMBDA=DIR for
## another) as a bootstrap under the pinned Runtime Interface Emulator on
## $(LAMBDA_ADDR), its table on a dynalite of its own on loopback. Invoke it
## with an event: curl -d @examples/lambda/event.json
## http://$(LAMBDA_ADDR)/2015-03-31/functions/function/invocations. Ctrl-C or
## `kill` of make stops the emulator, the function and dynalite. As with
## run, make runs built binaries, not `go run`, so that a SIGTERM reaches
## them.
LAMBDA      ?= examples/lambda
LAMBDA_ADDR ?= 127.0.0.1:9000
LAMBDA_OUT  ?= build/local
LAMBDA_BOOT := $(LAMBDA_OUT)/$(notdir $(LAMBDA))/bootstrap
run-lambda: deps tools
	CGO_ENABLED=0 $(GO) build $(PROGRAM_GOFLAGS) -o $(LAMBDA_BOOT) ./$(LAMBDA)
	$(GO) build -o $(LAMBDA_OUT)/testservers ./internal/tools/testservers
	$(GO) build -o $(LAMBDA_OUT)/runlambda ./internal/tools/runlambda
	$(LAMBDA_OUT)/testservers -only dynalite -- $(LAMBDA_OUT)/runlambda -rie $(TOOLS_BIN)/aws-lambda-rie -addr $(LAMBDA_ADDR) $(LAMBDA_BOOT)

## deps: the pinned test servers' packages (dynalite, from package-lock.json).
deps: node_modules/.installed

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

## lint: staticcheck over the whole module; zero findings.
lint:
	$(STATICCHECK) ./...

## test: gofmt, vet and staticcheck, then everything, with -race, against
## real dynalite and moto servers.
test: deps fmt-check vet lint
	$(GO) run ./internal/tools/testservers -- $(GO) test $(TESTFLAGS) ./...

## unit: the tests that need no server (integration tests skip).
unit:
	$(GO) test $(TESTFLAGS) ./...

clean:
	rm -rf bin build node_modules

include mk/lambda.mk
include mk/bench.mk
