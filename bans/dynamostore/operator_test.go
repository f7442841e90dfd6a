package dynamostore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/edgelimit/edgelimit/bans/dynamostore"
	"github.com/edgelimit/edgelimit/internal/banrule"
)

// decideOnly is a client with the functions' calls alone (API, not
// OperatorAPI), as the template's role grants them.
type decideOnly struct{ dynamostore.API }

type noDelete struct{ calls int }

func (n *noDelete) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	n.calls++
	return &dynamodb.GetItemOutput{}, nil
}

func (n *noDelete) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	n.calls++
	return &dynamodb.UpdateItemOutput{}, nil
}

// TestLiftNeedsOperatorAPI: a lift deletes the key's item, which the
// functions' clients need not be able to do; a store whose client cannot
// is refused with ErrConfig naming OperatorAPI, with no call made.
func TestLiftNeedsOperatorAPI(t *testing.T) {
	f := &noDelete{}
	store, err := dynamostore.New(dynamostore.Config{Client: decideOnly{f}, Table: "tbl"})
	if err != nil {
		t.Fatal(err)
	}
	err = store.LiftBan(context.Background(), banrule.Key{Policy: "paid", Key: "k"})
	if !errors.Is(err, dynamostore.ErrConfig) || !strings.Contains(err.Error(), "OperatorAPI") {
		t.Fatalf("LiftBan with a decide-only client: %v, want ErrConfig naming OperatorAPI", err)
	}
	if f.calls != 0 {
		t.Errorf("%d calls made", f.calls)
	}
	// A read works with the same client: the functions need no more.
	if _, err := store.ReadBan(context.Background(), banrule.Key{Policy: "paid", Key: "k"}); err != nil {
		t.Errorf("ReadBan with a decide-only client: %v", err)
	}
}
