package setup_test

import (
	"testing"

	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/dynamodb/inflight"
	"github.com/edgelimit/edgelimit/setup/dynamodb/kv"
	"github.com/edgelimit/edgelimit/setup/memory"
	"github.com/edgelimit/edgelimit/setup/signed"
)

// TestBackendsKeepOverrides: every backend of a strategy whose policies may
// have overrides (Strategy.Limits) can keep them, so that no policy file the
// parser accepts is refused at start-up for want of an override store.
// Regression: an inflight policy with overrides: true was accepted by the
// parser and refused by setup, on memory and on DynamoDB.
func TestBackendsKeepOverrides(t *testing.T) {
	for _, b := range []setup.Backend{
		memory.Durable(), memory.KV(), memory.InFlight(), signed.Backend(),
		durable.Backend(dynamodb.Config{}), kv.Backend(dynamodb.Config{}), inflight.Backend(dynamodb.Config{}),
	} {
		_, ok := b.(setup.OverrideBackend)
		if s := b.Strategy(); s.Limits != ok {
			t.Errorf("%T (strategy %s, Limits %v): keeps overrides %v", b, s.Name, s.Limits, ok)
		}
	}
}
