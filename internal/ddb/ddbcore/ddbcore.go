// Package ddbcore is the part of the DynamoDB plumbing that the stores
// link (each strategy's dynamostore): the one-table data model's attribute
// names and the classification of the server's errors. It builds no client. The client builder with the SDK's
// shared-config loader (config.LoadDefaultConfig: shared files, SSO, STS,
// IMDS) is package ddb's, for the CLI, the tests and the benchmarks, so
// that a Lambda function, which builds its client from the environment
// (setup/dynamodb), does not link that loader.
package ddbcore

import (
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Attribute names of the one-table data model (ARCHITECTURE.md, Data
// model).
const (
	AttrPK        = "pk"
	AttrExpiresAt = "expires_at"
)

// IsUnsupported reports an operation the server does not implement (dynalite
// lacks TransactWriteItems and UpdateTimeToLive).
func IsUnsupported(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "UnknownOperationException", "NotImplemented", "InvalidAction":
			return true
		}
	}
	return false
}

// IsThrottle reports DynamoDB throttling (ProvisionedThroughputExceeded,
// ThrottlingException, RequestLimitExceeded).
func IsThrottle(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded", "Throttling":
			return true
		}
	}
	return false
}

// IsConditionFailed reports a ConditionalCheckFailedException.
func IsConditionFailed(err error) bool {
	var cf *types.ConditionalCheckFailedException
	return errors.As(err, &cf)
}
