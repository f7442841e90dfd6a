package main

// This file is the bench's one contact with edgelimit's constructors: the
// policy parser, the engine, the in-process stores and the adapters. The
// decisions and middleware parts build everything through these functions,
// so that a rename in the main module is fixed here, in one place. (The
// protocol part builds its DynamoDB counters in protocol.go, and the flood
// server the whole `edgelimit serve` wiring through setup in floodserver.go:
// those measure exactly that wiring.)

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
)

// parsePolicies parses a generated policy file.
func parsePolicies(yaml string) (*policy.File, error) {
	return policy.Parse("bench.yaml", []byte(yaml))
}

// limiterFactory builds one policy's limiter (edgelimit.Config.Limiters).
type limiterFactory = func(p *policy.Policy) (edgelimit.Limiter, error)

// memoryCounters returns a factory of durable counters sharing one fresh
// durablecounter.Memory with its defaults (64 shards), as `edgelimit serve` keeps
// them in one process.
func memoryCounters() limiterFactory {
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		return durablecounter.New(durablecounter.Config{Policy: p, Store: store})
	}
}

// memoryBuckets returns a factory of kv buckets on kv, each keeping up to
// cacheKeys keys in its process cache (or, with noCache, reading and
// writing kv on every decision), on the clock now (nil: the request's).
func memoryBuckets(kv kvbucket.KV, cacheKeys int, noCache bool, now func() time.Time) limiterFactory {
	return func(p *policy.Policy) (edgelimit.Limiter, error) {
		return kvbucket.New(kvbucket.Config{Policy: p, KV: kv, CacheSize: cacheKeys, NoCache: noCache, Now: now})
	}
}

// memoryKV returns an in-process KV holding up to maxKeys bucket states.
func memoryKV(maxKeys int) kvbucket.KV {
	return kvbucket.NewMemory(kvbucket.MemoryConfig{MaxKeys: maxKeys})
}

// newEngine builds the engine every adapter wraps: the bench's fixed hash
// secret (so runs are reproducible) and a logger that discards, so that
// nothing measured writes a log line.
func newEngine(pf *policy.File, limiters limiterFactory) (*edgelimit.Engine, error) {
	return newEngineAt(pf, limiters, nil)
}

// newEngineAt is newEngine on the clock now (nil: time.Now).
func newEngineAt(pf *policy.File, limiters limiterFactory, now func() time.Time) (*edgelimit.Engine, error) {
	return edgelimit.New(edgelimit.Config{
		Policies:   pf,
		Limiters:   limiters,
		HashSecret: benchSecret,
		Logger:     slog.New(slog.DiscardHandler),
		Now:        now,
	})
}

// httpMiddleware is edgelimit's net/http adapter around next.
func httpMiddleware(e *edgelimit.Engine, next http.Handler) http.Handler {
	return middleware.Handler(e, next)
}

// httpMiddlewareBare is httpMiddleware for a handler that does not look
// its verdict up (middleware.WithoutVerdictContext): no request copy.
func httpMiddlewareBare(e *edgelimit.Engine, next http.Handler) http.Handler {
	return middleware.Handler(e, next, middleware.WithoutVerdictContext())
}

// httpAPIMiddleware is edgelimit's Lambda adapter for API Gateway HTTP API
// (payload v2) events around h.
func httpAPIMiddleware(e *edgelimit.Engine, h middleware.HTTPAPIHandler) middleware.HTTPAPIHandler {
	return middleware.HTTPAPI(e, h)
}
