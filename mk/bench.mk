# Benchmarks: BENCHMARKS.md and the plots in docs/bench/. Included from the
# repository's Makefile (`include mk/bench.mk`), so paths are relative to the
# repository root; it also works on its own: `make -f mk/bench.mk bench`.
#
#   make bench          everything (about 19 minutes on 2 cores): per-decision cost vs
#                       x/time/rate, go-limiter and throttled; per-request cost of each
#                       limiter's own net/http middleware (edgelimit, go-limiter,
#                       throttled, ulule/limiter, x/time/rate) net of the handler; one
#                       conditional write vs read-then-write on dynalite; the flood
#                       experiment; the cost model; kv across separate `edgelimit serve`
#                       processes, the kv strategy before its merging writes
#                       (KV_OLD_COMMIT) beside the working tree's, and across two
#                       regions. Writes BENCHMARKS.md and docs/bench/*.png, keeps the raw results in bench/out/*.json
#                       (git-ignored).
#   make bench-kv       the kv part alone (about 8 minutes), then the report
#   make bench-middleware  the middleware comparison, then the in-process decisions
#                       and the example functions' bootstraps beside the floor of a
#                       minimal aws-lambda-go + DynamoDB function (bench/lambdafloor),
#                       all in one run (about 10 minutes, no servers):
#                       bench/out/{middleware,decisions,bootstrap}.json, and their three
#                       sections of BENCHMARKS.md rewritten in place (the rest left as it is)
#   make bench-quick    the same with short runs, into bench/out/quick/ (development;
#                       BENCHMARKS.md and docs/bench are left alone)
#   make bench-report   BENCHMARKS.md and the plots again from bench/out/*.json
#   make bench-storefail  a store that hangs under a flood, the code before the store
#                       breaker (STOREFAIL_OLD_COMMIT) beside the working tree's (about
#                       1 minute; prints the table of docs/store-failure.md)
#   make dashboard-mock docs/dashboard.png: template.yaml's CloudWatch dashboard drawn
#                       from the EMF lines of a simulated hour of the example functions
#                       on dynalite (bench/dashmock; about 30 s)
#
# bench/ is its own Go module (bench/go.mod, with a replace of the main module
# by ../), so the alternatives it compares never enter the main module's
# go.mod, and `make test` (go test ./...) does not see it. The servers it
# needs are started and stopped by internal/tools/testservers: dynalite
# (required) and moto (optional: it gives the cost model DynamoDB's call
# pattern and measures transactions; without it those figures come from
# dynalite or are computed, and BENCHMARKS.md says so).

GO ?= go

# Including this file must not change the including Makefile's default goal.
bench_mk_default_goal := $(.DEFAULT_GOAL)

BENCH_BIN   := bench/out/edgelimit-bench
# BENCH_FLAGS are passed to the program, e.g. BENCH_FLAGS='-phase 15s -count 5'.
BENCH_FLAGS ?=

# The kv part compares the working tree with the kv strategy as it was
# before its writes merged instead of overwriting: KV_OLD_BIN is `edgelimit`
# built from KV_OLD_COMMIT in a temporary git worktree, removed once built.
KV_OLD_COMMIT ?= e340e63
KV_OLD_BIN    := bench/out/edgelimit-kv-old
KV_FLAGS       = -kv-old $(KV_OLD_BIN) -kv-old-commit $(KV_OLD_COMMIT)

.PHONY: bench-storefail bench bench-quick bench-report bench-build bench-deps bench-kv bench-kv-old bench-middleware dashboard-mock

## bench-build: the benchmark program (bench/ module) as bench/out/edgelimit-bench.
bench-build:
	cd bench && $(GO) build -o out/edgelimit-bench .

## bench-kv-old: edgelimit as of KV_OLD_COMMIT, built in a temporary worktree.
bench-kv-old:
	@mkdir -p bench/out
	@tmp=$$(mktemp -d) && git worktree add --quiet --detach "$$tmp/src" $(KV_OLD_COMMIT) && \
		(cd "$$tmp/src" && $(GO) build -o "$(CURDIR)/$(KV_OLD_BIN)" ./cmd/edgelimit); rc=$$?; \
		git worktree remove --force "$$tmp/src"; rm -rf "$$tmp"; exit $$rc

# dynalite comes from node_modules (package-lock.json), as for make test.
bench-deps:
	@test -x node_modules/.bin/dynalite || npm ci --no-audit --no-fund --loglevel=error

## bench: run everything and write BENCHMARKS.md and docs/bench/*.png.
bench: bench-build bench-deps bench-kv-old
	$(GO) run ./internal/tools/testservers -only dynalite,moto -- $(BENCH_BIN) -root . $(KV_FLAGS) $(BENCH_FLAGS) all

## bench-kv: the kv part alone, then BENCHMARKS.md from every part's results.
bench-kv: bench-build bench-deps bench-kv-old
	$(GO) run ./internal/tools/testservers -only dynalite -- $(BENCH_BIN) -root . $(KV_FLAGS) $(BENCH_FLAGS) kv
	$(BENCH_BIN) -root . report

## bench-quick: short runs into bench/out/quick (figures not for publishing).
bench-quick: bench-build bench-deps bench-kv-old
	$(GO) run ./internal/tools/testservers -only dynalite,moto -- $(BENCH_BIN) -root . -quick $(KV_FLAGS) \
		-out bench/out/quick -md bench/out/quick/BENCHMARKS.md -plots bench/out/quick/plots $(BENCH_FLAGS) all

## bench-middleware: the middleware comparison, decisions and bootstrap parts; rewrites their sections of BENCHMARKS.md.
bench-middleware: bench-build
	$(BENCH_BIN) -root . $(BENCH_FLAGS) middleware

## bench-storefail: what a hung store costs edgelimit serve, the code before
## the store breaker (STOREFAIL_OLD_COMMIT) beside the working tree's, in one
## run (about 1 minute; docs/store-failure.md has its table).
STOREFAIL_OLD_COMMIT ?= b1f5af2
STOREFAIL_FLAGS      ?=
bench-storefail: bench-deps
	@mkdir -p bench/out
	@tmp=$$(mktemp -d) && git worktree add --quiet --detach "$$tmp/src" $(STOREFAIL_OLD_COMMIT) && \
		(cd "$$tmp/src" && $(GO) build -o "$(CURDIR)/bench/out/edgelimit-storefail-old" ./cmd/edgelimit); rc=$$?; \
		git worktree remove --force "$$tmp/src"; rm -rf "$$tmp"; exit $$rc
	$(GO) build -o bench/out/edgelimit-storefail-new ./cmd/edgelimit
	cd bench && $(GO) build -o out/storefail ./storefail
	bench/out/storefail -dynalite-bin node_modules/.bin/dynalite \
		-old bench/out/edgelimit-storefail-old -old-label "before ($(STOREFAIL_OLD_COMMIT))" \
		-new bench/out/edgelimit-storefail-new -new-label "after" $(STOREFAIL_FLAGS)

## bench-report: rewrite BENCHMARKS.md and the plots from bench/out/*.json.
bench-report: bench-build
	$(BENCH_BIN) -root . report

## dashboard-mock: docs/dashboard.png, the dashboard of template.yaml rendered
## from a local run (DASHMOCK_FLAGS, e.g. '-emf lines.json' to draw other EMF lines).
DASHMOCK_FLAGS ?=
dashboard-mock: bench-deps
	$(GO) run ./internal/tools/testservers -only dynalite -- $(GO) -C bench run ./dashmock -root .. $(DASHMOCK_FLAGS)

.DEFAULT_GOAL := $(bench_mk_default_goal)
