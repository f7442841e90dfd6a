// Package setup wires a policy file to the strategy packages: it builds the
// edgelimit.Factory that turns each policy into the Limiter its strategy
// names, on in-memory stores (one process, the embedded default) or on a
// DynamoDB table (shared by every Lambda instance).
//
// The strategy packages never import each other; this package is the one
// place that knows them all, so functions and the CLI depend on it and
// libraries need not.
package setup

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/signedwindow"
)

// Config says where the strategies keep their state.
type Config struct {
	// DynamoDB, when set, backs durable and kv policies with Table; nil keeps
	// all state in this process (memory stores).
	DynamoDB *dynamodb.Client
	// Table is the DynamoDB table; required with DynamoDB.
	Table string
	// Keys is the key ring of signed policies (tokens and proof-of-work
	// challenges); required when a policy is signed. See
	// signedwindow.ParseKeyRing for EDGELIMIT_SECRETS.
	Keys *signedwindow.KeyRing
	// Logger receives strategy warnings; default slog.Default().
	Logger *slog.Logger
	// Now, if set, is every limiter's clock; by default each decides at the
	// instant the engine read for the request (edgelimit.Request.At).
	Now func() time.Time
}

// Factory returns the edgelimit.Factory for cfg. Durable policies share one
// store, so that several on one route commit atomically; kv policies share
// one KV.
func Factory(cfg Config) (edgelimit.Factory, error) {
	if cfg.DynamoDB != nil && cfg.Table == "" {
		return nil, errors.New("setup: Config.Table is required with DynamoDB")
	}
	var durable durablecounter.Store
	var kv kvbucket.KV
	if cfg.DynamoDB != nil {
		s, err := durablecounter.NewDynamoStore(durablecounter.DynamoConfig{Client: cfg.DynamoDB, Table: cfg.Table})
		if err != nil {
			return nil, err
		}
		k, err := kvbucket.NewDynamoDB(kvbucket.DynamoDBConfig{Client: cfg.DynamoDB, Table: cfg.Table, Now: cfg.Now})
		if err != nil {
			return nil, err
		}
		durable, kv = s, k
	} else {
		durable = durablecounter.NewMemoryStore(durablecounter.MemoryConfig{})
		kv = kvbucket.NewMemory(kvbucket.MemoryConfig{Now: cfg.Now})
	}
	return func(p *edgelimit.Policy) (edgelimit.Limiter, error) {
		switch p.Strategy {
		case edgelimit.StrategyDurable:
			return durablecounter.New(durablecounter.Config{Policy: p, Store: durable, Now: cfg.Now})
		case edgelimit.StrategyKV:
			return kvbucket.New(kvbucket.Config{Policy: p, KV: kv, Now: cfg.Now})
		case edgelimit.StrategySigned:
			if cfg.Keys == nil {
				return nil, errors.New("setup: signed policies need a key ring (Config.Keys, from EDGELIMIT_SECRETS)")
			}
			return signedwindow.New(signedwindow.Config{Policy: p, Keys: cfg.Keys, Now: cfg.Now, Logger: cfg.Logger})
		}
		return nil, fmt.Errorf("setup: strategy %q is not available in this build", p.Strategy)
	}, nil
}
