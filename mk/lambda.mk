# Lambda builds, SAM targets, the runtime-emulator end-to-end tests and the
# template lint. Included from the repository's Makefile (`include
# mk/lambda.mk`), so paths are relative to the repository root; it also works
# on its own: `make -f mk/lambda.mk build`.
#
#   make build          every function as build/<arch>/<fn>/bootstrap (arm64, amd64)
#   make generate       the functions' policy files compiled into Go (functions/handlers/trees_gen.go)
#   make e2e            the example functions on the Lambda Runtime Interface Emulator, against dynalite
#   make cold-start     binary sizes and init durations under the emulator (docs/deploy.md's table)
#   make lint-template  cfn-lint template.yaml
#   make deploy         sam build && sam deploy --guided (your AWS account; never run by make test)
#   make tools          install the pinned emulator into .tools/bin

GO ?= go

# Including this file must not change the including Makefile's default goal.
lambda_mk_default_goal := $(.DEFAULT_GOAL)

# The example functions (functions/<name>) and their resources in template.yaml.
LAMBDA_FUNCTIONS := paid contact search tts
LAMBDA_ARCHS     := arm64 amd64
# -tags lambda.norpc drops aws-lambda-go's net/rpc path (only the retired
# go1.x runtime used it); nethttpomithttp2 drops net/http's bundled HTTP/2
# (320 KB: the runtime API, DynamoDB and Secrets Manager are called over
# HTTP/1.1); edgelimit.noyaml leaves the YAML reader out of policy and setup
# (the functions' policy files are compiled: make generate);
# edgelimit.nopowgate leaves out setup's proof-of-work gate of durable and
# kv policies (none of the functions' policy files has proof_of_work;
# docs/powgate.md); -s -w strips the symbol table and DWARF. e2e builds with the same tags
# (TestBuildTagsAreMakeBuilds).
LAMBDA_TAGS      := lambda.norpc,nethttpomithttp2,edgelimit.noyaml,edgelimit.nopowgate
LAMBDA_GOFLAGS   := -tags $(LAMBDA_TAGS) -trimpath -ldflags "-s -w"
# A Lambda program of your own (examples/lambda, examples/llm: make
# run-lambda) reads its policy file with setup.FromEnv, the YAML reader, so
# it builds without edgelimit.noyaml.
PROGRAM_TAGS     := lambda.norpc,nethttpomithttp2
PROGRAM_GOFLAGS  := -tags $(PROGRAM_TAGS) -trimpath -ldflags "-s -w"
LAMBDA_BINARIES  := $(foreach a,$(LAMBDA_ARCHS),$(foreach f,$(LAMBDA_FUNCTIONS),build/$(a)/$(f)/bootstrap))

# The Lambda Runtime Interface Emulator, pinned; e2e/rie_test.go pins the
# same version (a test checks) and installs it there when it is missing.
RIE_MODULE  := github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
TOOLS_BIN   := $(CURDIR)/.tools/bin

.PHONY: build generate tools e2e cold-start lint-template deploy $(LAMBDA_BINARIES)

## build: every function as a Lambda bootstrap for linux/arm64 and linux/amd64.
build: $(LAMBDA_BINARIES)

## generate: each example function's embedded policy file compiled into its
## tree (functions/handlers/trees_gen.go), what its bootstrap parses instead
## of the YAML; run after editing functions/handlers/policies/*.yaml
## (TestTreesAreGenerated fails until then).
generate:
	$(GO) generate ./functions/handlers

# build/<arch>/<fn>/bootstrap; always delegated to go build, whose cache
# knows better than make when to rebuild.
$(LAMBDA_BINARIES): generate
	CGO_ENABLED=0 GOOS=linux GOARCH=$(word 2,$(subst /, ,$@)) \
		$(GO) build $(LAMBDA_GOFLAGS) -o $@ ./functions/$(word 3,$(subst /, ,$@))

# build-<LogicalId>: what `sam build` calls for a function with
# Metadata.BuildMethod makefile, with ARTIFACTS_DIR set to where the
# bootstrap must go. The template runs every function on arm64.
define lambda_sam_target
.PHONY: build-$(1)
build-$(1):
	@test -n "$$(ARTIFACTS_DIR)" || { echo "build-$(1): ARTIFACTS_DIR is not set (sam build sets it)" >&2; exit 2; }
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $$(GO) build $$(LAMBDA_GOFLAGS) -o "$$(ARTIFACTS_DIR)/bootstrap" ./functions/$(2)
endef
$(eval $(call lambda_sam_target,PaidFunction,paid))
$(eval $(call lambda_sam_target,ContactFunction,contact))
$(eval $(call lambda_sam_target,SearchFunction,search))
$(eval $(call lambda_sam_target,TTSFunction,tts))

## tools: the pinned Lambda Runtime Interface Emulator in .tools/bin (git-ignored).
tools: $(TOOLS_BIN)/aws-lambda-rie

$(TOOLS_BIN)/aws-lambda-rie:
	GOBIN=$(TOOLS_BIN) $(GO) install $(RIE_MODULE)@$(RIE_VERSION)

## e2e: the four functions as real bootstraps on the emulator, durable and kv
## ones against dynalite. `make test` runs the same tests as part of ./...
e2e: tools
	$(GO) run ./internal/tools/testservers -only dynalite -- $(GO) test -count=1 -v ./e2e/

## cold-start: bootstrap sizes (linux/arm64 as deployed, and this machine's) and
## the init duration under the emulator, median of 5 cold starts per function,
## as a Markdown table in build/cold-start.md.
cold-start: tools
	@mkdir -p build
	EDGELIMIT_COLDSTART_REPORT=$(CURDIR)/build/cold-start.md $(GO) test -count=1 -run 'TestColdStart$$' -v ./e2e/
	@cat build/cold-start.md

## lint-template: the SAM template must lint clean (cfn-lint with the SAM translator).
lint-template:
	cfn-lint template.yaml

## deploy: build with SAM (which calls the build-<LogicalId> targets above) and
## deploy interactively; see docs/deploy.md for the secret to create first.
deploy:
	sam build
	sam deploy --guided

.DEFAULT_GOAL := $(lambda_mk_default_goal)
