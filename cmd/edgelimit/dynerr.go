package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/setup"
)

// storeAt is the table a command works on, and where: a local server's
// endpoint, or AWS in a region.
type storeAt struct {
	table, endpoint, region string
}

// where names the server: the endpoint, or AWS and its region.
func (s storeAt) where() string {
	switch {
	case s.endpoint != "":
		return s.endpoint
	case s.region != "":
		return "AWS (" + s.region + ")"
	}
	return "AWS"
}

// endpointFix says how to point a command at another server.
func (s storeAt) endpointFix() string {
	if s.endpoint != "" {
		return "is the server running? (--dynamodb-endpoint, default " + setup.EnvEndpoint + ")"
	}
	return "check the network, and AWS_REGION (or " + setup.EnvEndpoint + " for a local server)"
}

func defaultTable() string {
	if t := os.Getenv(setup.EnvTable); t != "" {
		return t
	}
	return "edgelimit"
}

func regionOf(c ddb.TableAPI) string {
	if dc, ok := c.(*dynamodb.Client); ok {
		return dc.Options().Region
	}
	return ""
}

// dynamoError turns an error of the AWS SDK into one line that names the
// table, the server and what to do: noTable is the fix for a table that
// does not exist. An error that did not come from DynamoDB is returned as
// it is.
func dynamoError(err error, at storeAt, noTable string) error {
	var (
		notFound *types.ResourceNotFoundException
		signing  *v4.SigningError
		opErr    *net.OpError
		dnsErr   *net.DNSError
		netErr   net.Error
		apiErr   smithy.APIError
		call     *smithy.OperationError
	)
	op := "a call"
	if errors.As(err, &call) {
		op = call.Operation()
	}
	switch {
	case errors.Is(err, ddb.ErrNoTable), errors.As(err, &notFound):
		return fmt.Errorf("table %q does not exist at %s; %s", at.table, at.where(), noTable)
	case errors.As(err, &signing):
		return fmt.Errorf("no AWS credentials to call DynamoDB at %s: %v; configure them (aws configure, AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)", at.where(), rootCause(signing))
	case errors.As(err, &apiErr):
		msg := apiErr.ErrorCode()
		if m := apiErr.ErrorMessage(); m != "" {
			msg += ": " + m
		}
		switch apiErr.ErrorCode() {
		case "AccessDeniedException":
			return fmt.Errorf("DynamoDB at %s refused %s on table %q (%s); the role needs dynamodb:%s on the table (docs/operations.md lists what each command calls)", at.where(), op, at.table, msg, op)
		case "UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException", "MissingAuthenticationTokenException":
			return fmt.Errorf("DynamoDB at %s refused the credentials (%s); configure valid ones (aws configure, AWS_PROFILE)", at.where(), msg)
		}
		return fmt.Errorf("DynamoDB at %s: %s on table %q: %s", at.where(), op, at.table, msg)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("cannot reach DynamoDB at %s: %v; %s", at.where(), dnsErr, at.endpointFix())
	case errors.As(err, &opErr):
		return fmt.Errorf("cannot reach DynamoDB at %s: %v; %s", at.where(), opErr, at.endpointFix())
	case errors.As(err, &netErr), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cannot reach DynamoDB at %s: %v; %s", at.where(), rootCause(err), at.endpointFix())
	case strings.Contains(err.Error(), "region is required"), strings.Contains(err.Error(), "Invalid region"):
		return fmt.Errorf("no AWS region for DynamoDB: set AWS_REGION (or a profile's region), or %s for a local server", setup.EnvEndpoint)
	}
	return err
}

// rootCause is the innermost error err wraps.
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

const createTableUsage = `usage: edgelimit create-table [flags]

Creates the table the durable, kv and inflight strategies keep their state in,
as template.yaml declares it (partition key pk, on-demand, TTL on expires_at),
on AWS or on a local server (--dynamodb-endpoint), and waits until it is
active. A table that exists is left as it is.
`

// runCreateTable creates the table.
func runCreateTable(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCmdline("create-table", createTableUsage)
	table := c.fs.String("table", defaultTable(), "the table (EDGELIMIT_TABLE sets the default)")
	endpoint := c.fs.String("dynamodb-endpoint", os.Getenv(setup.EnvEndpoint), "the endpoint URL of a local server, e.g. http://127.0.0.1:8000 (default: EDGELIMIT_DYNAMODB_ENDPOINT, else AWS)")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return c.usageError(stderr, "takes no arguments, got %q", pos)
	}
	client, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: *endpoint})
	if err != nil {
		return c.fail(stderr, err)
	}
	at := storeAt{table: *table, endpoint: *endpoint, region: client.Options().Region}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := ddb.CreateTable(cctx, client, *table); err != nil {
		return c.fail(stderr, dynamoError(err, at, "(it could not be created)"))
	}
	fmt.Fprintf(stdout, "table %q is ready at %s\n", *table, at.where())
	return exitOK
}
