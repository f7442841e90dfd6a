package inflight_test

import (
	"net/http"
	"testing"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/inflight/dynamostore"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/middleware"
)

// The conformance suite of concurrency limits (limitertest.RunInFlight) on
// every store: at fixed instants, and with 64 clients at once, on memory,
// dynalite and moto; and the same policies through the engine and the
// net/http middleware (limitertest.RunInFlightEngine).

// limiters returns how to build Limiters on store.
func limiters(store inflight.Store) limitertest.NewLimiter {
	return func(s limitertest.Spec) (edgelimit.Limiter, error) {
		return inflight.New(inflight.Config{Policy: s.Policy, Store: store, Now: s.Now,
			Options: &inflight.Options{RetryAfter: s.RetryAfter}})
	}
}

func onMemory(t *testing.T) limitertest.NewLimiter {
	return limiters(inflight.NewMemory(inflight.MemoryConfig{}))
}

// dynamo returns a backend on a fresh table of s for every test.
func onDynamo(s ddbtest.Server) limitertest.Backend {
	return func(t *testing.T) limitertest.NewLimiter {
		client, table, _ := ddbtest.Table(t, s)
		store, err := dynamostore.New(dynamostore.Config{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		return limiters(store)
	}
}

var (
	flightOptions = limitertest.InFlightOptions{RetryAfter: inflight.DefaultRetryAfter}
	flightEngine  = limitertest.InFlightEngine{
		Strategy: inflight.Strategy,
		Handler:  func(e *edgelimit.Engine, next http.Handler) http.Handler { return middleware.Handler(e, next) },
	}
)

func TestConformanceMemory(t *testing.T) {
	opts := flightOptions
	opts.Churn = 200
	limitertest.RunInFlight(t, onMemory, opts)
}

func TestConformanceDynamo(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		limitertest.RunInFlight(t, onDynamo(s), flightOptions)
	})
}

func TestEngineMemory(t *testing.T) { limitertest.RunInFlightEngine(t, onMemory, flightEngine) }

func TestEngineDynamo(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, s ddbtest.Server) {
		limitertest.RunInFlightEngine(t, onDynamo(s), flightEngine)
	})
}
