// Command lambdafloor is the floor the example functions' bootstraps are
// measured against (edgelimit-bench bootstrap): the smallest Lambda
// function that any DynamoDB-backed rate limiter pays for, aws-lambda-go
// serving API Gateway HTTP API events and an AWS SDK DynamoDB client,
// built as the functions build theirs (dynamodb.New with the credentials
// of the Lambda environment, no config loader), doing one UpdateItem per
// request. It is built with the functions' flags (mk/lambda.mk) and run
// only to read its package init; it never serves a request here.
package main

import (
	"context"
	"os"
	"strconv"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func main() {
	client := dynamodb.New(dynamodb.Options{
		Region: os.Getenv("AWS_REGION"),
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(
			os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN"))),
	})
	table := os.Getenv("TABLE")
	lambda.Start(func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		out, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(table),
			Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: req.RequestContext.HTTP.SourceIP}},
			UpdateExpression:          aws.String("ADD n :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
			ReturnValues:              types.ReturnValueUpdatedNew,
		})
		if err != nil {
			return events.APIGatewayV2HTTPResponse{StatusCode: 503}, nil
		}
		n := ""
		if v, ok := out.Attributes["n"].(*types.AttributeValueMemberN); ok {
			n = v.Value
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: strconv.Quote(n)}, nil
	})
}
