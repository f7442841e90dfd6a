package dynamostore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/inflight/dynamostore"
	"github.com/edgelimit/edgelimit/policy"
)

// fake stands in for the DynamoDB client on error paths; it records the
// update expressions it was sent.
type fake struct {
	t      *testing.T
	update func(n int, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
	mu     sync.Mutex
	sent   []string
}

func (f *fake) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	f.sent = append(f.sent, aws.ToString(in.UpdateExpression))
	n := len(f.sent)
	f.mu.Unlock()
	return f.update(n, in)
}

func (f *fake) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.t.Fatal("unexpected GetItem")
	return nil, nil
}

func (f *fake) releases() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.sent {
		if strings.HasPrefix(e, "REMOVE") {
			n++
		}
	}
	return n
}

func fakeLimiter(t *testing.T, f *fake) *inflight.Limiter {
	t.Helper()
	store, err := dynamostore.New(dynamostore.Config{Client: f, Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := inflight.New(inflight.Config{
		Policy: &policy.Policy{Name: "speech", Limit: 2, Window: time.Minute},
		Store:  store, Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

type apiError struct {
	code  string
	fault smithy.ErrorFault
}

func (e apiError) Error() string                 { return e.code }
func (e apiError) ErrorCode() string             { return e.code }
func (e apiError) ErrorMessage() string          { return e.code }
func (e apiError) ErrorFault() smithy.ErrorFault { return e.fault }

// TestCleanupAfterAnUnknownOutcome: a take whose write failed without a
// definite answer may have landed; the store releases its holder, so that
// the slot is not held until the lease ends by a request that was never
// admitted. A definite refusal needs no release.
func TestCleanupAfterAnUnknownOutcome(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		releases int
		is       error
	}{
		{"timeout", context.DeadlineExceeded, 1, context.DeadlineExceeded},
		{"server error", apiError{"InternalServerError", smithy.FaultServer}, 1, nil},
		{"validation", apiError{"ValidationException", smithy.FaultClient}, 0, nil},
		{"throttled", apiError{"ThrottlingException", smithy.FaultClient}, 0, inflight.ErrThrottled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{t: t}
			f.update = func(n int, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				if n == 1 {
					return nil, tc.err
				}
				return &dynamodb.UpdateItemOutput{}, nil
			}
			_, err := fakeLimiter(t, f).Allow(context.Background(), edgelimit.Request{Key: "k"})
			if err == nil || tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Allow = %v, want an error (%v)", err, tc.is)
			}
			if got := f.releases(); got != tc.releases {
				t.Errorf("%d releases after %v, want %d (sent %q)", got, tc.err, tc.releases, f.sent)
			}
		})
	}
}

// TestContentionBounded: a take that loses every round to other instances
// (each answer shows a reclaimable slot, each write fails) gives up with
// ErrContention, a store failure, not a denial and not a loop.
func TestContentionBounded(t *testing.T) {
	f := &fake{t: t}
	expired := &types.AttributeValueMemberN{Value: "1"} // 1 ns after the epoch: long expired
	f.update = func(int, *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
		return nil, &types.ConditionalCheckFailedException{Item: map[string]types.AttributeValue{
			"pk":  &types.AttributeValueMemberS{Value: "if#speech#k"},
			"n":   &types.AttributeValueMemberN{Value: "2"},
			"h_a": expired, "h_b": expired,
		}}
	}
	_, err := fakeLimiter(t, f).Allow(context.Background(), edgelimit.Request{Key: "k"})
	if !errors.Is(err, inflight.ErrContention) {
		t.Fatalf("Allow = %v, want ErrContention", err)
	}
	if len(f.sent) != 32 {
		t.Errorf("%d writes, want 32", len(f.sent))
	}
}

func TestNewValidates(t *testing.T) {
	f := &fake{t: t}
	for _, cfg := range []dynamostore.Config{{Table: "t"}, {Client: f}, {Client: f, Table: "t", ExpiryMargin: -1}} {
		if _, err := dynamostore.New(cfg); !errors.Is(err, inflight.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}
