// Package dynamodb says where the DynamoDB table of the durable and kv
// strategies is: the one table shared by every instance that the example
// functions deploy with. The table comes from EDGELIMIT_TABLE
// (setup.EnvTable), an endpoint override from EDGELIMIT_DYNAMODB_ENDPOINT
// (setup.EnvEndpoint), and the credentials from what Lambda sets; or both are
// given. The backends are in its sub-packages, durable and kv, so that a
// function links only the strategy it uses.
package dynamodb

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/edgelimit/edgelimit/setup"
)

// Config says where the table is. The zero Config reads the environment
// when the backend opens.
type Config struct {
	// Client, if set, is the DynamoDB client; default one built from the
	// environment (see the package documentation).
	Client *dynamodb.Client
	// Table, if set, is the table; default EDGELIMIT_TABLE.
	Table string
}

// Open returns the client and the table, from cfg or the environment: what
// the durable and kv backends (setup/dynamodb/durable, setup/dynamodb/kv)
// build their stores on.
func (cfg Config) Open(env *setup.BackendEnv) (*dynamodb.Client, string, error) {
	table := cfg.Table
	if table == "" {
		table = strings.TrimSpace(env.Getenv(setup.EnvTable))
	}
	if table == "" {
		return nil, "", fmt.Errorf("%w: %s is not set; policies %s keep their state in DynamoDB: set it to the table's name (template.yaml does)",
			setup.ErrEnv, setup.EnvTable, env.PolicyNames())
	}
	client := cfg.Client
	if client == nil {
		var err error
		if client, err = lambdaDynamoDB(env.Getenv, strings.TrimSpace(env.Getenv(setup.EnvEndpoint))); err != nil {
			return nil, "", err
		}
	}
	env.WarmUp("dynamodb:"+table, func(ctx context.Context) error { return warmUp(ctx, client, table) })
	return client, table, nil
}

// warmUpKey is the item the warm-up reads: no policy's item has it.
const warmUpKey = "edgelimit#warm-up"

// warmUp opens client's connection to the table with one eventually
// consistent GetItem of an item that does not exist (half a read unit,
// and the dynamodb:GetItem permission every backend's calls need).
func warmUp(ctx context.Context, client *dynamodb.Client, table string) error {
	_, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: warmUpKey}}})
	return err
}

// lambdaDynamoDB builds the DynamoDB client from what Lambda puts in the
// environment: the region (AWS_REGION) and the execution role's temporary
// credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN),
// which is where the SDK's default chain finds them on Lambda too. Building
// the client directly instead of through config.LoadDefaultConfig keeps the
// shared-config, SSO and STS code out of the binary (1.6 MB of 10.4 MB,
// linux/arm64) and off the cold start. With an endpoint override and no
// credentials (a local server) it signs with placeholders.
func lambdaDynamoDB(getenv func(string) string, endpoint string) (*dynamodb.Client, error) {
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	id, secret, session := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SESSION_TOKEN")
	if endpoint != "" {
		if region == "" {
			region = "us-east-1"
		}
		if id == "" || secret == "" {
			id, secret, session = "local", "local", ""
		}
	}
	switch {
	case region == "":
		return nil, fmt.Errorf("%w: AWS_REGION is not set (Lambda sets it; set it when running elsewhere)", setup.ErrEnv)
	case id == "" || secret == "":
		return nil, fmt.Errorf("%w: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set: Lambda sets them from the "+
			"execution role; elsewhere, set them or %s for a local server", setup.ErrEnv, setup.EnvEndpoint)
	}
	opts := dynamodb.Options{
		Region:      region,
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(id, secret, session)),
		HTTPClient: awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConns = 64
			tr.MaxIdleConnsPerHost = 64
		}),
	}
	if endpoint != "" {
		opts.BaseEndpoint = aws.String(endpoint)
	}
	return dynamodb.New(opts), nil
}
