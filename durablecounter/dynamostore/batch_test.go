package dynamostore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/durablecounter/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddb"
)

// batchPair returns two Counters on one fake store.
func batchPair(t *testing.T, f *fakeDynamo, mode dynamostore.TransactionMode) (a, b *durablecounter.Counter) {
	t.Helper()
	a, store := fakeCounter(t, f, 10, mode)
	return a, newCounter(t, store, "burst", 2, time.Hour)
}

func batchOf(a, b *durablecounter.Counter) []edgelimit.BatchItem {
	return []edgelimit.BatchItem{
		{Limiter: a, Request: edgelimit.Request{Key: "k"}},
		{Limiter: b, Request: edgelimit.Request{Key: "k"}},
	}
}

func countsReply(in *dynamodb.BatchGetItemInput, counts map[string]int64) *dynamodb.BatchGetItemOutput {
	out := &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{}}
	for table, ka := range in.RequestItems {
		for _, k := range ka.Keys {
			pk := pkOf(k)
			if n, ok := counts[pk]; ok {
				it := item(n, 1_700_002_860)
				it[ddb.AttrPK] = &types.AttributeValueMemberS{Value: pk}
				out.Responses[table] = append(out.Responses[table], it)
			}
		}
	}
	return out
}

func TestTransactionDenied(t *testing.T) {
	var read []string
	f := &fakeDynamo{
		transact: func(_ context.Context, in *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
			for _, it := range in.TransactItems {
				if it.Update.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
					t.Errorf("transaction item without ALL_OLD")
				}
			}
			return nil, &types.TransactionCanceledException{
				Message: aws.String("Transaction cancelled"),
				CancellationReasons: []types.CancellationReason{
					{Code: aws.String("None")},
					{Code: aws.String("ConditionalCheckFailed"), Item: item(2, 1_700_002_860)},
				},
			}
		},
		batchGet: func(_ context.Context, in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
			for _, ka := range in.RequestItems {
				for _, k := range ka.Keys {
					read = append(read, pkOf(k))
				}
			}
			return countsReply(in, map[string]int64{pk0: 4}), nil
		},
	}
	a, b := batchPair(t, f, dynamostore.TransactionsAuto)
	ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
	if err != nil {
		t.Fatal(err)
	}
	if !ds[0].Allowed || ds[0].Remaining != 6 || ds[1].Allowed || ds[1].Remaining != 0 || ds[1].Policy != "burst" {
		t.Errorf("AllowBatch = %+v, want paid allowed with Remaining 6 (not spent), burst denied", ds)
	}
	if len(read) != 1 || read[0] != pk0 {
		t.Errorf("read %q after the cancellation, want only %q (the other came with ALL_OLD)", read, pk0)
	}
}

func TestTransactionConflictRetried(t *testing.T) {
	attempts := 0
	f := &fakeDynamo{
		transact: func(context.Context, *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
			attempts++
			if attempts == 1 {
				return nil, &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{
					{Code: aws.String("None")}, {Code: aws.String("TransactionConflict")},
				}}
			}
			return &dynamodb.TransactWriteItemsOutput{}, nil
		},
		batchGet: func(_ context.Context, in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
			return countsReply(in, map[string]int64{pk0: 1, "fw#burst#k#1699999200": 1}), nil
		},
	}
	a, b := batchPair(t, f, dynamostore.TransactionsAuto)
	ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 2 || !ds[0].Allowed || ds[0].Remaining != 9 || !ds[1].Allowed || ds[1].Remaining != 1 {
		t.Errorf("after a conflict: %d attempts, %+v; want 2 attempts, both allowed with Remaining 9 and 1", attempts, ds)
	}
}

func TestTransactionsUnsupported(t *testing.T) {
	unknown := &smithy.GenericAPIError{Code: "UnknownOperationException", Message: "unknown operation"}
	newFake := func() *fakeDynamo {
		return &fakeDynamo{
			transact: func(context.Context, *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
				return nil, unknown
			},
			update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				return updated(1)
			},
		}
	}
	t.Run("auto falls back once and for all", func(t *testing.T) {
		f := newFake()
		a, b := batchPair(t, f, dynamostore.TransactionsAuto)
		for range 2 {
			ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
			if err != nil || !ds[0].Allowed || !ds[1].Allowed {
				t.Fatalf("AllowBatch = %+v, %v; want both allowed", ds, err)
			}
		}
		if tx, up := f.n("TransactWriteItems"), f.n("UpdateItem"); tx != 1 || up != 4 {
			t.Errorf("TransactWriteItems %d, UpdateItem %d; want 1 (detection) and 4", tx, up)
		}
	})
	t.Run("required fails", func(t *testing.T) {
		f := newFake()
		a, b := batchPair(t, f, dynamostore.TransactionsRequired)
		if _, err := a.AllowBatch(context.Background(), batchOf(a, b)); !errors.Is(err, durablecounter.ErrNoTransactions) {
			t.Errorf("AllowBatch = %v, want ErrNoTransactions", err)
		}
	})
}

func TestSequentialBatchCompensates(t *testing.T) {
	var ops []string
	f := &fakeDynamo{
		update: func(_ context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
			pk := pkOf(in.Key)
			ops = append(ops, aws.ToString(in.UpdateExpression)+" "+pk)
			switch {
			case aws.ToString(in.UpdateExpression) == "ADD n :r":
				return &dynamodb.UpdateItemOutput{}, nil
			case pk == pk0:
				return updated(5)
			}
			return nil, conditionFailed(nil) // dynalite: no ALL_OLD
		},
		get: func(context.Context, *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			return &dynamodb.GetItemOutput{Item: item(2, 1_700_002_860)}, nil
		},
	}
	a, b := batchPair(t, f, dynamostore.TransactionsOff)
	ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ADD n :d SET expires_at = :e " + pk0,
		"ADD n :d SET expires_at = :e fw#burst#k#1699999200",
		"ADD n :r " + pk0, // the compensation
	}
	if strings.Join(ops, "\n") != strings.Join(want, "\n") {
		t.Errorf("updates:\n%s\nwant:\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
	if !ds[0].Allowed || ds[0].Remaining != 6 || ds[1].Allowed {
		t.Errorf("AllowBatch = %+v; want paid allowed with Remaining 6 (its state without the batch), burst denied", ds)
	}
}

func TestCommittedBatchWithFailedRead(t *testing.T) {
	f := &fakeDynamo{
		transact: func(context.Context, *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
			return &dynamodb.TransactWriteItemsOutput{}, nil
		},
		batchGet: func(context.Context, *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
			return nil, errors.New("connection reset")
		},
	}
	a, b := batchPair(t, f, dynamostore.TransactionsAuto)
	ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
	if err != nil {
		t.Fatalf("AllowBatch after a committed transaction = %v; the units are spent, so the decisions must stand", err)
	}
	if !ds[0].Allowed || ds[0].Remaining != 0 || !ds[1].Allowed || ds[1].Remaining != 0 {
		t.Errorf("AllowBatch = %+v, want both allowed, Remaining unknown so reported 0", ds)
	}
}

// TestTransactionDeniedJudgesOnlyUnevaluated: after a cancellation, a
// member the server evaluated as fitting keeps its verdict whatever a later
// read shows, and a member it did not evaluate (a conflict) is judged by the
// count read.
func TestTransactionDeniedJudgesOnlyUnevaluated(t *testing.T) {
	pkBurst := "fw#burst#k#1699999200"
	for _, tc := range []struct {
		name        string
		firstCode   string
		readCount   int64
		wantAllowed bool
		wantRemain  int64
	}{
		{"evaluated and fitting, full by the time of the read", "None", 10, true, 0},
		{"conflict, fits", "TransactionConflict", 4, true, 6},
		{"conflict, full", "TransactionConflict", 10, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDynamo{
				transact: func(context.Context, *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
					return nil, &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{
						{Code: aws.String(tc.firstCode)},
						{Code: aws.String("ConditionalCheckFailed"), Item: item(2, 1_700_002_860)},
					}}
				},
				batchGet: func(_ context.Context, in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
					return countsReply(in, map[string]int64{pk0: tc.readCount, pkBurst: 2}), nil
				},
			}
			a, b := batchPair(t, f, dynamostore.TransactionsAuto)
			ds, err := a.AllowBatch(context.Background(), batchOf(a, b))
			if err != nil {
				t.Fatal(err)
			}
			if ds[0].Allowed != tc.wantAllowed || ds[0].Remaining != tc.wantRemain || ds[1].Allowed {
				t.Errorf("AllowBatch = %+v; want paid {Allowed %v, Remaining %d}, burst denied", ds, tc.wantAllowed, tc.wantRemain)
			}
			if n := f.n("TransactWriteItems"); n != 1 {
				t.Errorf("TransactWriteItems calls = %d, want 1: a condition failed, so no retry", n)
			}
		})
	}
}
