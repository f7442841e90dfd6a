package dynamostore_test

import (
	"context"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/policy"
)

// One Store per process, shared by every durable policy, so that the
// policies of one route commit together. (The example functions build
// their client from Lambda's environment instead: setup/dynamodb.)
func ExampleNew() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamostore.Config{Client: dynamodb.NewFromConfig(cfg), Table: "edgelimit"})
	if err != nil {
		log.Fatal(err)
	}
	counter, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "paid-daily", Limit: 1000, Window: 24 * time.Hour},
		Store:  store,
	})
	if err != nil {
		log.Fatal(err)
	}
	d, err := counter.Allow(context.Background(), edgelimit.Request{Key: "hashed-api-key"})
	if err != nil {
		log.Fatal(err) // the store failed: the engine applies on_store_error
	}
	log.Printf("allowed %v, %d left", d.Allowed, d.Remaining)
}
