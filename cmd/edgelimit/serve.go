package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/internal/apigwlocal"
	"github.com/edgelimit/edgelimit/internal/ddb"
	isecret "github.com/edgelimit/edgelimit/internal/secret"
	"github.com/edgelimit/edgelimit/metrics"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/dynamodb/inflight"
	"github.com/edgelimit/edgelimit/setup/dynamodb/kv"
	"github.com/edgelimit/edgelimit/setup/memory"
	"github.com/edgelimit/edgelimit/setup/signed"
	"github.com/edgelimit/edgelimit/signedwindow"
)

type serveFlags struct {
	addr        string
	policies    string
	store       string
	endpoint    string
	table       string
	kvRegions   string
	createTable bool
	logFormat   string
	// exitWithParent: stop when the parent process exits (make run).
	exitWithParent bool
	// emf: write each decision's EMF line (package metrics) to emfOut,
	// standard output, as the functions do on Lambda (edgelimit top reads them).
	emf    bool
	emfOut io.Writer
}

const serveUsage = `usage: edgelimit serve [flags]

Serves every route of a policy file, running each request through the API Gateway v2
Lambda middleware around the example functions' handlers (and, on other routes, a demo
handler that echoes the route and the decision).
`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f serveFlags
	c := newCmdline("serve", serveUsage)
	fs := c.fs
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&f.policies, "policies", os.Getenv(setup.EnvPolicyFile), "policy file (default: EDGELIMIT_POLICY_FILE, else the embedded example policies.yaml)")
	fs.StringVar(&f.store, "store", "memory", "where counters live: memory (in-process) or dynamodb")
	fs.StringVar(&f.endpoint, "dynamodb-endpoint", os.Getenv(setup.EnvEndpoint), "with --store dynamodb: the endpoint URL of a local server, e.g. http://127.0.0.1:8000 (default: EDGELIMIT_DYNAMODB_ENDPOINT, else AWS)")
	fs.StringVar(&f.table, "table", defaultTable(), "with --store dynamodb: the table (EDGELIMIT_TABLE sets the default)")
	fs.StringVar(&f.kvRegions, "kv-regions", "", "with --store dynamodb: the regions of a kv table replicated over regions (a Global Table), comma separated, this one included (the client's region, AWS_REGION); each region writes only its own part of a bucket (default: "+setup.EnvKVRegions+", else one region)")
	fs.BoolVar(&f.createTable, "create-table", false, "with --store dynamodb: create the table if it does not exist")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&f.emf, "emf", false, "write each decision's metric line (CloudWatch EMF, as the functions write them on Lambda) to standard output, for 'edgelimit top'")
	fs.BoolVar(&f.exitWithParent, "exit-with-parent", false, "stop when the process that started serve exits (make run sets it, so that stopping make stops the server)")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return c.usageError(stderr, "takes no arguments, got %q", pos)
	}
	switch f.store {
	case "memory":
		for _, name := range []string{"dynamodb-endpoint", "table", "kv-regions", "create-table"} {
			if c.set(name) {
				return c.usageError(stderr, "--%s is for --store dynamodb; the memory store keeps everything in this process", name)
			}
		}
	case "dynamodb":
	default:
		return c.usageError(stderr, "--store %q is not one of memory, dynamodb", f.store)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return c.usageError(stderr, "--log-format %q is not one of text, json", f.logFormat)
	}
	if f.emf {
		f.emfOut = stdout
	}
	if f.exitWithParent {
		var cancel context.CancelFunc
		ctx, cancel = withParent(ctx, os.Getppid, parentPollInterval, stderr)
		defer cancel()
	}
	log := newLogger(stderr, f.logFormat)
	srv, err := newServer(ctx, f, log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "edgelimit serve: %v\n", err)
		return 1
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		fmt.Fprintf(stderr, "edgelimit serve: %s\n", listenError(f.addr, err))
		return 1
	}
	fmt.Fprintf(stdout, "edgelimit serve: listening on http://%s (store %s, %s from %s)\n",
		ln.Addr(), f.store, countOf(len(srv.policies.Policies), "policy", "policies"), srv.policies.Source)
	printTable(stdout, srv.policies)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 1 << 20}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		fmt.Fprintf(stderr, "edgelimit serve: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return 0
}

func newLogger(w io.Writer, format string) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// listenError turns the common listen failures into one clear line.
func listenError(addr string, err error) string {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Sprintf("cannot listen on %s: the port is already in use (another edgelimit serve?); choose another with --addr", addr)
	case errors.Is(err, syscall.EACCES):
		return fmt.Sprintf("cannot listen on %s: permission denied; use a port above 1023", addr)
	}
	return fmt.Sprintf("cannot listen on %s: %v", addr, err)
}

type server struct {
	policies *policy.File
	mux      *http.ServeMux
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func newServer(ctx context.Context, f serveFlags, log *slog.Logger, stderr io.Writer) (*server, error) {
	pf, err := loadPolicyFile(f.policies)
	if err != nil {
		return nil, err
	}
	engine, err := newEngine(ctx, f, pf, log, stderr)
	if err != nil {
		return nil, err
	}
	// The example functions' handlers answer their routes, exactly as they do
	// on Lambda; every other route gets the demo echo.
	app := handlers.Mux(handlers.Deps{Logger: log}, demoHandler)
	api, err := apigwlocal.New(apigwlocal.Config{Handler: withRequestID(middleware.HTTPAPI(engine, app)), Logger: log, RouteKey: handlers.RouteKey})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", api)
	// The proof-of-work demo: a page at / that calls the first signed route
	// with proof of work, solving its challenge in the browser.
	if method, path, ok := demoRoute(pf); ok {
		mux.Handle("GET /{$}", pow.DemoHandler(method, path))
		mux.Handle("GET /pow.js", pow.ScriptHandler())
	}
	return &server{policies: pf, mux: mux}, nil
}

// withRequestID puts in h's context the Lambda context the runtime gives a
// function's handler, with the event's request id (the demo echo's
// request_id) standing for the invocation's, which serve has none of: so
// each line of --emf carries its request's requestId, as on Lambda.
func withRequestID(h middleware.HTTPAPIHandler) apigwlocal.Handler {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return h(lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: ev.RequestContext.RequestID}), ev)
	}
}

// newEngine builds the engine serve decides with, reading what it reads at
// start-up: the key ring of signed policies, the hash key, each list's file
// and variable (edgelimit.New), and with --store dynamodb the table. check
// builds it too, on the memory store, with notes discarded: what serve
// would refuse, check refuses with the same message.
func newEngine(ctx context.Context, f serveFlags, pf *policy.File, log *slog.Logger, notes io.Writer) (*edgelimit.Engine, error) {
	var backends []setup.Backend
	getenv := os.Getenv
	if usesStrategy(pf, signedwindow.Strategy) {
		keys, err := keyRing(notes)
		if err != nil {
			return nil, err
		}
		backends = append(backends, signed.WithKeys(keys))
	}
	switch f.store {
	case "memory":
		backends = append(backends, memory.Durable(), memory.KV(), memory.InFlight())
	case "dynamodb":
		client, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: f.endpoint})
		if err != nil {
			return nil, err
		}
		if err := prepareTable(ctx, client, f); err != nil {
			return nil, err
		}
		cfg := dynamodb.Config{Client: client, Table: f.table}
		backends = append(backends, durable.Backend(cfg), kv.Backend(cfg), inflight.Backend(cfg))
		getenv = kvRegionsEnv(getenv, f.kvRegions, client.Options().Region)
	default:
		return nil, fmt.Errorf("--store %q is not one of memory, dynamodb", f.store)
	}
	secret, err := hashSecret(notes)
	if err != nil {
		return nil, err
	}
	benv := setup.BackendEnv{Getenv: getenv, Logger: log}
	factory, err := setup.Limiters(pf, backends, benv)
	if err != nil {
		return nil, err
	}
	ovr, err := setup.Overrides(pf, backends, benv)
	if err != nil {
		return nil, err
	}
	bans, err := setup.Bans(pf, backends, benv)
	if err != nil {
		return nil, err
	}
	cfg := edgelimit.Config{Policies: pf, Limiters: factory, HashSecret: secret, Logger: log, Overrides: ovr, Bans: bans}
	if f.emfOut != nil {
		m, err := metrics.NewEMF(metrics.EMFConfig{Writer: f.emfOut})
		if err != nil {
			return nil, err
		}
		cfg.Observe, cfg.ObserveBreaker = m.Observe, m.ObserveBreaker
	}
	return edgelimit.New(cfg)
}

// kvRegionsEnv is getenv with --kv-regions, when given, as
// EDGELIMIT_KV_REGIONS, and the client's region as AWS_REGION when the
// environment sets none (the SDK found it in the shared config): what the
// kv backend reads to name this region's part of a bucket.
func kvRegionsEnv(getenv func(string) string, regions, clientRegion string) func(string) string {
	return func(k string) string {
		switch v := getenv(k); {
		case k == setup.EnvKVRegions && regions != "":
			return regions
		case k == "AWS_REGION" && v == "" && getenv("AWS_DEFAULT_REGION") == "":
			return clientRegion
		default:
			return v
		}
	}
}

func usesStrategy(pf *policy.File, strategy *policy.Strategy) bool {
	for _, p := range pf.Policies {
		if p.Strategy == strategy {
			return true
		}
	}
	return false
}

// demoRoute picks the route the demo page calls: the first exact route of a
// signed policy with proof of work.
func demoRoute(pf *policy.File) (method, path string, ok bool) {
	for _, p := range pf.Policies {
		if o, ok := p.Options.(*signedwindow.Options); !ok || o.ProofOfWork == nil {
			continue
		}
		for _, r := range p.Routes {
			m := r.Method
			if m == "ANY" {
				m = "POST"
			}
			path := r.Path
			if r.Prefix {
				path += "demo"
			}
			return m, path, true
		}
	}
	return "", "", false
}

// prepareTable creates or checks the table, with one clear line for each
// way it can fail.
func prepareTable(ctx context.Context, c ddb.TableAPI, f serveFlags) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var err error
	if f.createTable {
		err = ddb.CreateTable(cctx, c, f.table)
	} else {
		err = ddb.CheckTable(cctx, c, f.table)
	}
	if err == nil {
		return nil
	}
	return dynamoError(err, storeAt{table: f.table, endpoint: f.endpoint, region: regionOf(c)},
		"create it with --create-table (or deploy template.yaml)")
}

// hashSecret reads EDGELIMIT_HASH_KEY as the functions do (setup.HashKey).
// Without it, a random key is fine for one local process; say so once.
func hashSecret(stderr io.Writer) ([]byte, error) {
	s := os.Getenv(setup.EnvHashKey)
	if s == "" {
		fmt.Fprintln(stderr, "edgelimit serve: EDGELIMIT_HASH_KEY not set; using a random key hash secret for this process (counters in a shared store will not match other instances)")
		return isecret.Random(), nil
	}
	return setup.HashKey(s)
}
