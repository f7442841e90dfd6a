// Command replicator replicates a DynamoDB table between two local servers
// (or two tables of one) with a fixed lag, last writer wins per item: a
// model of a DynamoDB Global Table over two regions, for dynalite and moto,
// which have none. See package replicate for what it models and what not.
//
//	go run ./internal/tools/replicator -a http://127.0.0.1:8000 -b http://127.0.0.1:8001 -table edgelimit -lag 1s
//
// It runs until interrupted, then prints its counters as JSON on stdout.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/internal/tools/replicator/replicate"
)

func main() {
	a := flag.String("a", "", "endpoint of region a's server (required)")
	b := flag.String("b", "", "endpoint of region b's server (default: a's)")
	table := flag.String("table", "edgelimit", "table in both regions")
	tableA := flag.String("table-a", "", "region a's table (default -table)")
	tableB := flag.String("table-b", "", "region b's table (default -table)")
	lag := flag.Duration("lag", time.Second, "replication lag")
	poll := flag.Duration("poll", 50*time.Millisecond, "scan interval")
	flag.Parse()
	if *a == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *b == "" {
		*b = *a
	}
	if *tableA == "" {
		*tableA = *table
	}
	if *tableB == "" {
		*tableB = *table
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ca, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: *a})
	if err == nil && *tableA == *tableB && *a == *b {
		err = fmt.Errorf("region a and b are the same table %q at %s", *tableA, *a)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicator:", err)
		os.Exit(1)
	}
	cb, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: *b})
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicator:", err)
		os.Exit(1)
	}
	r, err := replicate.New(replicate.Config{
		A:   replicate.Replica{Name: "a", Client: ca, Table: *tableA},
		B:   replicate.Replica{Name: "b", Client: cb, Table: *tableB},
		Lag: *lag, Poll: *poll,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicator:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "replicator: %s/%s <-> %s/%s, lag %s, polling every %s\n", *a, *tableA, *b, *tableB, *lag, *poll)
	err = r.Run(ctx)
	out, _ := json.Marshal(r.Stats())
	fmt.Println(string(out))
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicator:", err)
		os.Exit(1)
	}
}
