package dynamostore_test

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/kvbucket/dynamostore"
	"github.com/edgelimit/edgelimit/policy"
)

// On AWS: one table shared with the durable strategy, one Store per
// process and one Bucket per kv policy, built once outside the Lambda
// handler. (The example functions build their client from Lambda's
// environment instead: setup/dynamodb.)
func ExampleNew() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	kv, err := dynamostore.New(dynamostore.Config{Client: dynamodb.NewFromConfig(cfg), Table: os.Getenv("EDGELIMIT_TABLE")})
	if err != nil {
		log.Fatal(err)
	}
	policies, err := policy.Load("policies.yaml")
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range policies.Policies {
		if p.Strategy == kvbucket.Strategy {
			if _, err := kvbucket.New(kvbucket.Config{Policy: p, KV: kv}); err != nil {
				log.Fatal(err)
			}
		}
	}
}
