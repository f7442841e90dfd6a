// Package ddb holds the DynamoDB plumbing of the CLI, the tests and the
// benchmarks: building a client for AWS or a local server with the SDK's
// default configuration chain, and creating and checking the table. What the
// stores link (the attribute names, the error classification) is in package
// ddbcore, which this package re-exports: a store that imported this one
// would link the SDK's shared-config loader (config: shared files, SSO,
// STS) into every Lambda function.
package ddb

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/edgelimit/edgelimit/internal/ddb/ddbcore"
)

// Attribute names of the one-table data model (ARCHITECTURE.md, Data
// model), as ddbcore's.
const (
	AttrPK        = ddbcore.AttrPK
	AttrExpiresAt = ddbcore.AttrExpiresAt
)

// ClientOptions tune NewClient.
type ClientOptions struct {
	// Endpoint is a local server's URL ("http://127.0.0.1:8000"); empty for AWS.
	Endpoint string
	// HTTPClient replaces the default buildable client (tests count calls).
	HTTPClient aws.HTTPClient
	// MaxConns bounds idle connections per host; default 256.
	MaxConns int
}

// NewClient builds a DynamoDB client. For AWS (no Endpoint) it loads the
// default configuration chain (Lambda's role credentials and region). For a
// local server it uses the environment's region and credentials when set,
// and harmless placeholders otherwise.
func NewClient(ctx context.Context, opt ClientOptions) (*dynamodb.Client, error) {
	maxConns := opt.MaxConns
	if maxConns == 0 {
		maxConns = 256
	}
	hc := opt.HTTPClient
	if hc == nil {
		// AWS_CA_BUNDLE is honoured by the buildable client; a plain
		// *http.Client would make the config loader panic.
		hc = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConns = maxConns
			tr.MaxIdleConnsPerHost = maxConns
		})
	}
	loadOpts := []func(*config.LoadOptions) error{config.WithHTTPClient(hc)}
	if opt.Endpoint != "" {
		if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
			loadOpts = append(loadOpts, config.WithRegion("us-east-1"))
		}
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
			loadOpts = append(loadOpts, config.WithCredentialsProvider(
				credentials.NewStaticCredentialsProvider("local", "local", "")))
		}
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("ddb: load AWS config: %w", err)
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if opt.Endpoint != "" {
			o.BaseEndpoint = aws.String(opt.Endpoint)
		}
	}), nil
}

// TableAPI is the part of *dynamodb.Client that CreateTable and CheckTable use.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// ErrNoTable is returned by CheckTable when the table does not exist.
var ErrNoTable = errors.New("ddb: table does not exist")

// CreateTable creates the edgelimit table (partition key pk, on-demand
// billing, TTL on expires_at) and waits until it is active. An existing
// table is left alone. Servers without UpdateTimeToLive (dynalite) are
// tolerated: readers treat expired items as absent anyway.
func CreateTable(ctx context.Context, c TableAPI, table string) error {
	_, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("ddb: create table %q: %w", table, err)
	}
	for i := 0; ; i++ {
		out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return fmt.Errorf("ddb: describe table %q: %w", table, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			break
		}
		if i > 600 {
			return fmt.Errorf("ddb: table %q not active after 60s", table)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	_, err = c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(AttrExpiresAt), Enabled: aws.Bool(true),
		},
	})
	if err != nil && !IsUnsupported(err) && !isTTLAlreadyOn(err) {
		return fmt.Errorf("ddb: enable TTL on %q: %w", table, err)
	}
	return nil
}

// CheckTable reports ErrNoTable when the table is missing, or the error that
// stopped the check (an unreachable endpoint, missing permissions).
func CheckTable(ctx context.Context, c TableAPI, table string) error {
	_, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return fmt.Errorf("%w: %q", ErrNoTable, table)
	}
	if err != nil {
		return fmt.Errorf("ddb: describe table %q: %w", table, err)
	}
	return nil
}

// IsUnsupported is ddbcore.IsUnsupported.
func IsUnsupported(err error) bool { return ddbcore.IsUnsupported(err) }

func isTTLAlreadyOn(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ValidationException" &&
		(strings.Contains(ae.ErrorMessage(), "already enabled") || strings.Contains(ae.ErrorMessage(), "TimeToLive is already"))
}

// IsThrottle is ddbcore.IsThrottle.
func IsThrottle(err error) bool { return ddbcore.IsThrottle(err) }

// IsConditionFailed is ddbcore.IsConditionFailed.
func IsConditionFailed(err error) bool { return ddbcore.IsConditionFailed(err) }
