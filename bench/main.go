// Command edgelimit-bench measures edgelimit beside its alternatives and
// writes BENCHMARKS.md and the plots in docs/bench/. `make bench` runs it
// (see mk/bench.mk): it builds this program and runs `all` under the
// repository's test-server runner, which starts dynalite for it.
//
// Subcommands, each writing its results as JSON under -out so that every
// figure in BENCHMARKS.md is traceable to one command:
//
//	decisions   per-decision cost in process: every strategy vs x/time/rate,
//	            go-limiter and throttled (ns/op, allocs/op, serial, parallel)
//	middleware  per-request cost of each limiter's own net/http middleware
//	            around one handler, net of the handler (edgelimit, go-limiter,
//	            throttled, ulule/limiter, x/time/rate); run alone, it runs
//	            decisions and bootstrap after it and rewrites their three
//	            sections of BENCHMARKS.md in place
//	bootstrap   the example functions' bootstraps beside the floor of a
//	            minimal aws-lambda-go + DynamoDB function (bench/lambdafloor),
//	            built in the same run: sizes, package init, bytes by package
//	protocol    against dynalite: one conditional write vs read-then-write
//	flood       the flood experiment: a CPU-bound search behind the Lambda
//	            middleware, one flooding client and one legitimate client
//	kv          issue #14: separate `edgelimit serve` processes sharing one
//	            table and one key, the code before the issue (-kv-old) and
//	            the working tree's side by side; two regions with a
//	            replicator between two dynalite servers
//	report      BENCHMARKS.md and the PNG plots from the JSON results
//	report-middleware
//	            the middleware section of BENCHMARKS.md again from
//	            middleware.json, the rest of the file left as it is
//	all         the measuring parts above, in order
//
// It is its own Go module (bench/go.mod) so that the main module never
// depends on the alternatives it is compared with.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// defaultBenchtime is the -benchtime default.
const defaultBenchtime = 300 * time.Millisecond

// options are the flags every subcommand shares.
type options struct {
	out      string        // directory of the JSON results
	root     string        // repository root
	md       string        // BENCHMARKS.md to write
	plots    string        // directory of the PNG plots
	dynalite string        // dynalite endpoint
	quick    bool          // short runs, for development
	benchT   time.Duration // testing.Benchmark's benchtime
	count    int           // repetitions of each micro-benchmark (median kept)
	mwCount  int           // repetitions of each middleware cell (median kept)
	phase    time.Duration // length of one flood phase
	step     time.Duration // length of one step of the offered-load sweep
	cmdline  string        // how the program was invoked, for the report
	// The kv part: the binaries compared, the commit the old one was built
	// from (for the report) and the length of each steady run.
	kvOld, kvNew, kvOldCommit string
	kvDuration                time.Duration
	kvOnly                    string // comma-separated scenario ids; empty: all
}

func main() {
	if len(os.Args) >= 2 && os.Args[1] == floodServerCmd {
		os.Exit(runFloodServer(os.Args[2:]))
	}
	if len(os.Args) >= 2 && os.Args[1] == kvServerCmd {
		os.Exit(runKVServer(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var o options
	fs := flag.NewFlagSet("edgelimit-bench", flag.ContinueOnError)
	fs.StringVar(&o.root, "root", ".", "repository root (BENCHMARKS.md and docs/bench are written there)")
	fs.StringVar(&o.out, "out", "", "directory for the JSON results (default ROOT/bench/out)")
	fs.StringVar(&o.md, "md", "", "report to write (default ROOT/BENCHMARKS.md)")
	fs.StringVar(&o.plots, "plots", "", "directory for the PNG plots (default ROOT/docs/bench)")
	fs.StringVar(&o.dynalite, "dynalite", os.Getenv("EDGELIMIT_DYNALITE_ENDPOINT"), "dynalite endpoint (default $EDGELIMIT_DYNALITE_ENDPOINT)")
	fs.BoolVar(&o.quick, "quick", false, "short runs for development; figures are not for publishing")
	fs.DurationVar(&o.benchT, "benchtime", defaultBenchtime, "benchtime of each micro-benchmark run")
	fs.IntVar(&o.count, "count", 3, "runs of each micro-benchmark; the median is reported")
	fs.IntVar(&o.mwCount, "mw-count", mwDefaultCount, "runs of each cell of the middleware part; the median is reported")
	fs.DurationVar(&o.phase, "phase", 8*time.Second, "length of each flood phase")
	fs.DurationVar(&o.step, "step", 2*time.Second, "length of each step of the offered-load sweep")
	fs.StringVar(&o.kvOld, "kv-old", "", "kv: the edgelimit binary before issue #14 (mk/bench.mk builds it); empty: the new code only")
	fs.StringVar(&o.kvNew, "kv-new", "", "kv: the edgelimit binary to measure (default: built from ROOT)")
	fs.StringVar(&o.kvOldCommit, "kv-old-commit", "", "kv: the commit -kv-old was built from, for the report")
	fs.DurationVar(&o.kvDuration, "kv-duration", 30*time.Second, "kv: length of each steady run")
	fs.StringVar(&o.kvOnly, "kv-only", "", "kv: run only these scenarios (comma-separated ids), for development")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: edgelimit-bench [flags] all|decisions|middleware|bootstrap|protocol|flood|kv|report|report-middleware\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if o.out == "" {
		o.out = filepath.Join(o.root, "bench", "out")
	}
	if o.md == "" {
		o.md = filepath.Join(o.root, "BENCHMARKS.md")
	}
	if o.plots == "" {
		o.plots = filepath.Join(o.root, "docs", "bench")
	}
	if o.quick {
		o.benchT, o.count, o.mwCount, o.phase, o.step = 100*time.Millisecond, 1, 1, 3*time.Second, time.Second
		o.kvDuration = 8 * time.Second
	}
	o.cmdline = "edgelimit-bench " + strings.Join(args, " ")
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "edgelimit-bench:", err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch cmd := fs.Arg(0); cmd {
	case "decisions", "protocol", "flood", "kv":
		err = runPart(ctx, o, cmd, parts[cmd])
	case "bootstrap":
		// Its section of the report rewritten in place, as the middleware
		// run rewrites it.
		if err = runPart(ctx, o, cmd, parts[cmd]); err == nil {
			err = updateBootstrapSection(o)
		}
	case "middleware":
		// The middleware comparison, the in-process decisions and the
		// bootstrap beside its floor, in one run, their sections of the
		// report rewritten in place.
		for _, part := range []string{"middleware", "decisions", "bootstrap"} {
			if err = runPart(ctx, o, part, parts[part]); err != nil {
				break
			}
		}
		if err == nil {
			err = updateMiddlewareSection(o)
		}
	case "report":
		err = runReport(o)
	case "report-middleware":
		err = runMiddlewareReport(o)
	case "all":
		for _, name := range partNames {
			logf("== %s", name)
			if err = runPart(ctx, o, name, parts[name]); err != nil {
				break
			}
		}
		if err == nil {
			err = runReport(o)
		}
	default:
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "edgelimit-bench:", err)
		return 1
	}
	return 0
}

// partNames are the measuring subcommands, in the order `all` runs them.
var partNames = []string{"decisions", "middleware", "bootstrap", "protocol", "flood", "kv"}

// parts are the measuring subcommands.
var parts = map[string]partFunc{
	"decisions":  runDecisions,
	"middleware": runMiddleware,
	"protocol":   runProtocol,
	"flood":      runFlood,
	"kv":         runKV,
	"bootstrap":  runBootstrap,
}

// logf reports progress on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
