# edgelimit — see README.md. `make run` and `make test` are the quick start.
GO        ?= go
ADDR      ?= 127.0.0.1:8080
POLICIES  ?= cmd/edgelimit/policies.yaml
RUN_BIN   ?= bin/edgelimit
TESTFLAGS ?= -race -shuffle=on -count=1 -timeout 15m

# staticcheck, pinned in a module of its own (internal/tools/staticcheck/go.mod)
# so that its requirements never enter the go.mod of a module that imports
# ours (a `tool` line in our go.mod would add them to every importer's
# module graph).
STATICCHECK ?= $(GO) tool -modfile=internal/tools/staticcheck/go.mod staticcheck

.PHONY: run test deps vet lint fmt-check unit clean

## run: edgelimit serve on $(ADDR) (make run ADDR=127.0.0.1:9090 for another
## port). Ctrl-C or `kill` of make stops it. The binary is built first and
## run by make itself, not by `go run` (which passes no SIGTERM on to the
## server); --exit-with-parent stops the server even when make is killed in
## a way it cannot pass on (kill -9).
run:
	$(GO) build -o $(RUN_BIN) ./cmd/edgelimit
	$(RUN_BIN) serve --addr $(ADDR) --policies $(POLICIES) --exit-with-parent

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
