package main

import (
	"context"
	_ "embed"
	"log"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/secretsmanager"
)

//go:embed policies.yaml
var policies []byte

func main() {
	env, err := setup.FromEnv(context.Background(), setup.EnvConfig{Policies: policies,
		Backends: []setup.Backend{durable.Backend(dynamodb.Config{})}, Secrets: secretsmanager.Source()})
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(middleware.HTTPAPI(env.Engine, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "hello\n"}, nil
	}))
}
