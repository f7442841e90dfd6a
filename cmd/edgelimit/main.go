// Command edgelimit is the toolkit's CLI:
//
//	edgelimit serve   [--addr 127.0.0.1:8080] [--policies FILE] [--store memory|dynamodb] ...
//	edgelimit check   FILE
//	edgelimit get     [-X METHOD] [-H 'Name: value'] [-d BODY] [-n N] [-i] [-v] [-o FILE] URL
//	edgelimit solve   CHALLENGE
//	edgelimit keygen
//	edgelimit create-table [--table NAME] [--dynamodb-endpoint URL]
//	edgelimit usage|reset|grant|override [flags] POLICY KEY ...
//	edgelimit top     [-n N] [--policy NAME] [--key KEY] [--json] [FILE...]
//	edgelimit ban list|lift [flags] POLICY KEY
//
// serve runs every route of a policy file locally, translating each HTTP
// request into an API Gateway HTTP API event and passing it through the same
// Lambda middleware that runs in production. check validates a policy file,
// and everything serve would read with it (list files and variables), and
// prints which policies guard which routes. get is the reference client of
// the signed strategy; solve and keygen are its small tools. create-table
// makes the table the durable, kv and inflight strategies keep their state
// in. usage, reset, grant and override are the operator's commands on a
// client key's quota in the deployed table. top ranks the client keys
// (hashed) with the most denials in the decision lines of serve --emf or of
// the functions.
//
// Every subcommand takes its flags before, between or after its arguments,
// and exits 0 when it did its work (or printed the help -h asked for), 1
// when it could not, and 2 when its command line is wrong.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `edgelimit — rate limits for serverless APIs without Redis.

Usage:
  edgelimit serve [flags]     serve a policy file's routes locally (API Gateway v2 emulation)
  edgelimit check FILE        validate a policy file, its list files and variables; print its routes -> policies table
  edgelimit get [flags] URL   a curl-like client that keeps tokens, solves challenges and retries
  edgelimit solve CHALLENGE   solve a proof-of-work challenge and print the proof
  edgelimit keygen            print a new key ring entry for EDGELIMIT_SECRETS
  edgelimit create-table      create the DynamoDB table (on AWS or a local server)
  edgelimit usage POLICY KEY  a client key's quota, what is left and when it resets
  edgelimit reset POLICY KEY  forget a client key's usage
  edgelimit grant POLICY KEY UNITS   give a client key units beyond its quota
  edgelimit override set|get|delete POLICY KEY   a client key's own limits
  edgelimit top [FILE...]     the client keys (hashed) with the most denials, from decision lines
  edgelimit ban list|lift POLICY KEY   a client key's ban: show it, or lift it

Run 'edgelimit COMMAND -h' for a command's flags. Flags may come before or
after the arguments. Exit status: 0 done, 1 failed, 2 a wrong command line.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "check":
		return runCheck(args[1:], stdout, stderr)
	case "create-table":
		return runCreateTable(ctx, args[1:], stdout, stderr)
	case "keygen":
		return runKeygen(args[1:], stdout, stderr)
	case "solve":
		return runSolve(ctx, args[1:], stdout, stderr)
	case "get":
		return runGet(ctx, args[1:], stdout, stderr)
	case "usage", "reset", "grant", "override":
		return runQuota(ctx, args[0], args[1:], stdout, stderr)
	case "top":
		return runTop(ctx, args[1:], os.Stdin, stdout, stderr)
	case "ban":
		return runBan(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "edgelimit: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}
