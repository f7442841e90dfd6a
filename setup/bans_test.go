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

// TestBackendsKeepBans: exactly the backends of the strategies whose
// policies may have a ban (Strategy.Bans) can keep bans, so that no policy
// file the parser accepts is refused at start-up for want of a ban store.
func TestBackendsKeepBans(t *testing.T) {
	for _, b := range []setup.Backend{
		memory.Durable(), memory.KV(), memory.InFlight(), signed.Backend(),
		durable.Backend(dynamodb.Config{}), kv.Backend(dynamodb.Config{}), inflight.Backend(dynamodb.Config{}),
	} {
		_, ok := b.(setup.BanBackend)
		if s := b.Strategy(); s.Bans != ok {
			t.Errorf("%T (strategy %s, Bans %v): keeps bans %v", b, s.Name, s.Bans, ok)
		}
	}
}
