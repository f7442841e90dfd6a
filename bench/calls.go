package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/edgelimit/edgelimit/internal/ddb"
)

// Tally counts DynamoDB calls and the request units they would be billed
// on an on-demand table. It is safe for concurrent use.
type Tally struct {
	mu    sync.Mutex
	calls map[string]int64
	// rru and wru are read and write request units, counted by the rules
	// in capacity.
	rru, wru float64
}

// NewTally returns an empty Tally.
func NewTally() *Tally { return &Tally{calls: map[string]int64{}} }

func (t *Tally) add(op string, r, w float64) {
	t.mu.Lock()
	t.calls[op]++
	t.rru += r
	t.wru += w
	t.mu.Unlock()
}

// Snapshot is a Tally's counts at one moment.
type Snapshot struct {
	Calls map[string]int64 `json:"calls"`
	RRU   float64          `json:"rru"`
	WRU   float64          `json:"wru"`
}

// Total returns the number of calls of every operation.
func (s Snapshot) Total() int64 {
	var n int64
	for _, c := range s.Calls {
		n += c
	}
	return n
}

// Sub returns s - o.
func (s Snapshot) Sub(o Snapshot) Snapshot {
	d := Snapshot{Calls: map[string]int64{}, RRU: s.RRU - o.RRU, WRU: s.WRU - o.WRU}
	for k, v := range s.Calls {
		if v -= o.Calls[k]; v != 0 {
			d.Calls[k] = v
		}
	}
	return d
}

// Add returns s + o.
func (s Snapshot) Add(o Snapshot) Snapshot {
	d := Snapshot{Calls: map[string]int64{}, RRU: s.RRU + o.RRU, WRU: s.WRU + o.WRU}
	for k, v := range s.Calls {
		d.Calls[k] += v
	}
	for k, v := range o.Calls {
		d.Calls[k] += v
	}
	return d
}

// Snapshot returns the counts so far.
func (t *Tally) Snapshot() Snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Snapshot{Calls: make(map[string]int64, len(t.calls)), RRU: t.rru, WRU: t.wru}
	for k, v := range t.calls {
		s.Calls[k] = v
	}
	return s
}

type tallyKey struct{}

// withTally returns ctx carrying t: every DynamoDB call made with ctx (or a
// context derived from it, as the engine's time budget is) is counted in t
// as well as in the client's own Tally.
func withTally(ctx context.Context, t *Tally) context.Context {
	return context.WithValue(ctx, tallyKey{}, t)
}

// countingHTTP is the DynamoDB client's HTTP client: it counts every request
// by operation (X-Amz-Target) and its request units, read from the request
// body, before passing it on.
type countingHTTP struct {
	inner aws.HTTPClient
	all   *Tally
}

func (c *countingHTTP) Do(r *http.Request) (*http.Response, error) {
	op := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(op, '.'); i >= 0 {
		op = op[i+1:]
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	rru, wru := capacity(op, body)
	c.all.add(op, rru, wru)
	if t, ok := r.Context().Value(tallyKey{}).(*Tally); ok {
		t.add(op, rru, wru)
	}
	return c.inner.Do(r)
}

// countingClient returns a DynamoDB client for endpoint whose calls are
// counted in the returned Tally (and in the Tally of each call's context).
func countingClient(ctx context.Context, endpoint string) (*dynamodb.Client, *Tally, error) {
	base, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: endpoint, MaxConns: 512})
	if err != nil {
		return nil, nil, err
	}
	all := NewTally()
	c := dynamodb.New(base.Options(), func(o *dynamodb.Options) {
		o.HTTPClient = &countingHTTP{inner: o.HTTPClient, all: all}
	})
	return c, all, nil
}

// capacity returns the read and write request units DynamoDB on-demand
// bills for one request, for items under 1 KB (ours are under 200 bytes)
// and under 4 KB read:
//
//   - GetItem: 1 RRU strongly consistent, 0.5 eventually consistent;
//     BatchGetItem the same per key.
//   - PutItem, UpdateItem, DeleteItem: 1 WRU, also when the condition fails
//     (DynamoDB bills a failed conditional write as a write).
//   - TransactWriteItems: 2 WRU per item; TransactGetItems: 2 RRU per item
//     (transactions count double).
//   - BatchWriteItem: 1 WRU per request.
//
// Table management (CreateTable, DescribeTable) is counted as a call and
// billed nothing.
func capacity(op string, body []byte) (rru, wru float64) {
	var in struct {
		ConsistentRead bool
		RequestItems   map[string]json.RawMessage
		TransactItems  []json.RawMessage
	}
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem":
		return 0, 1
	case "GetItem":
		_ = json.Unmarshal(body, &in)
		if in.ConsistentRead {
			return 1, 0
		}
		return 0.5, 0
	case "TransactWriteItems":
		_ = json.Unmarshal(body, &in)
		return 0, 2 * float64(len(in.TransactItems))
	case "TransactGetItems":
		_ = json.Unmarshal(body, &in)
		return 2 * float64(len(in.TransactItems)), 0
	case "BatchGetItem":
		_ = json.Unmarshal(body, &in)
		for _, raw := range in.RequestItems {
			var t struct {
				Keys           []json.RawMessage
				ConsistentRead bool
			}
			_ = json.Unmarshal(raw, &t)
			per := 0.5
			if t.ConsistentRead {
				per = 1
			}
			rru += per * float64(len(t.Keys))
		}
		return rru, 0
	case "BatchWriteItem":
		_ = json.Unmarshal(body, &in)
		for _, raw := range in.RequestItems {
			var reqs []json.RawMessage
			_ = json.Unmarshal(raw, &reqs)
			wru += float64(len(reqs))
		}
		return 0, wru
	}
	return 0, 0
}
