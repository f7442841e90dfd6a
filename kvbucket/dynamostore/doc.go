// Package dynamostore is kvbucket's KV on a DynamoDB table, shared by every
// instance that uses the table (and with the durable strategy): one item
// per bucket, changed only by commutative updates (an UpdateItem ADD, or a
// SET to a floor under a condition), read eventually consistent, or
// strongly when the bucket asks (see the kvbucket documentation for the
// model, the cache and the over-admission bound).
//
//	store, err := dynamostore.New(dynamostore.Config{Client: client, Table: "edgelimit"})
//	bucket, err := kvbucket.New(kvbucket.Config{Policy: p, KV: store})
//
// It is a package of its own so that the AWS SDK is linked only by the
// programs that import it: kvbucket, its Memory KV, middleware, pow and
// signedwindow link none of it (TestLinksNoAWSSDK), and this package links
// the DynamoDB client but not the SDK's shared-config loader
// (TestLinksNoConfigLoader): a Lambda function builds its client from the
// environment (setup/dynamodb).
//
// # What this package does, and what kvbucket does
//
// durablecounter/dynamostore converts the algorithms' own SDK-free updates
// (expression strings and values) because durablecounter's protocol is
// many conditional updates and transactions, and those belong next to the
// algorithms. kvbucket's store protocol is smaller: two operations (Get,
// Update) on a bucket's parts (kvbucket/internal/wire), whose semantics
// kvbucket states and tests on every KV (its TestKVUpdateSemantics runs
// memory, dynalite and moto). This package implements them: which
// UpdateItem to send for an Update (store.go) and the item's attributes
// (item.go). Every decision about a bucket (what to spend, when to sync, a
// share) stays in kvbucket. A Store is a kvbucket.KV, which is sealed, as
// every strategy's store is (see kvbucket.KV).
//
// # The item
//
//	pk          S   kv#<policy>#<keyhash>, with Regions kv#<policy>#<keyhash>@<region>
//	tat         N   the region's partial TAT, in bucket units (up to 38 digits)
//	spent       N   tokens the region spent, less refunds
//	ver         N   the part's version (orders concurrent answers)
//	w<epoch>    NS  the instances that wrote in an epoch
//	expires_at  N   epoch seconds, for the table's TTL
//
// # Server quirks
//
// dynalite ignores ReturnValuesOnConditionCheckFailure: after a failed
// condition whose old item did not come back, Update tries the other form
// once and then reads the item (one consistent GetItem), in one place
// (Store.Update). moto and DynamoDB return the old item.
package dynamostore
