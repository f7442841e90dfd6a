//go:build tools

package edgelimit

import (
	_ "github.com/aws/aws-lambda-go/events"
	_ "github.com/aws/aws-lambda-go/lambda"
	_ "github.com/aws/aws-sdk-go-v2/aws"
	_ "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	_ "github.com/aws/smithy-go"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/stretchr/testify/require"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/time/rate"
)
