package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/apigwlocal"
	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/kvbucket/dynamostore"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
)

// kvServerCmd is the hidden subcommand the kv part starts for a region of
// a table replicated over regions: the wiring of `edgelimit serve` (the
// engine, middleware.HTTPAPI, the local API Gateway emulation) with kv
// policies on a kvbucket/dynamostore.Store configured with Region and
// Regions (as `edgelimit serve --kv-regions` is, with the region from the
// environment), and a region named by a flag rather than AWS_REGION, so
// that one machine runs every region. It prints "listening on
// http://ADDR" as serve does.
const kvServerCmd = "kv-server"

func runKVServer(args []string) int {
	fs := flag.NewFlagSet(kvServerCmd, flag.ContinueOnError)
	policies := fs.String("policies", "", "policy file (kv policies only)")
	endpoint := fs.String("dynamodb-endpoint", "", "DynamoDB endpoint of this region's server")
	table := fs.String("table", "", "DynamoDB table")
	region := fs.String("region", "", "this region's name")
	regions := fs.String("regions", "", "all regions, comma-separated")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := serveKV(*policies, *endpoint, *table, *region, *regions); err != nil {
		fmt.Fprintln(os.Stderr, "kv-server:", err)
		return 1
	}
	return 0
}

func serveKV(policies, endpoint, table, region, regions string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pf, err := policy.Load(policies)
	if err != nil {
		return err
	}
	client, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: endpoint})
	if err != nil {
		return err
	}
	cfg := dynamostore.Config{Client: client, Table: table, Region: region}
	if regions != "" {
		cfg.Regions = strings.Split(regions, ",")
	}
	kv, err := dynamostore.New(cfg)
	if err != nil {
		return err
	}
	factory := func(p *policy.Policy) (edgelimit.Limiter, error) {
		if p.Strategy != kvbucket.Strategy {
			return nil, fmt.Errorf("policy %q: kv-server runs kv policies only", p.Name)
		}
		return kvbucket.New(kvbucket.Config{Policy: p, KV: kv})
	}
	secret, err := setup.HashKey(os.Getenv(setup.EnvHashKey))
	if err != nil {
		return err
	}
	engine, err := edgelimit.New(edgelimit.Config{Policies: pf, Limiters: factory, HashSecret: secret, Logger: quiet})
	if err != nil {
		return err
	}
	ok := middleware.HTTPAPIHandler(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusOK, Body: "ok\n"}, nil
	})
	api, err := apigwlocal.New(apigwlocal.Config{Handler: apigwlocal.Handler(middleware.HTTPAPI(engine, ok)), Logger: quiet})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("kv-server: listening on http://%s (region %s of %s)\n", ln.Addr(), region, regions)
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
