package durablecounter

import (
	"context"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/keyhash"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// TestDefaultDenyCacheHolds100kKeys pins DefaultDenyCacheSize against a
// realistic key count (issue #16): 100,000 keys, each of which spent its
// whole quota, must all be answered from the deny cache. The 65,536 of
// before held about two thirds of them.
func TestDefaultDenyCacheHolds100kKeys(t *testing.T) {
	t.Parallel()
	const n = 100_000
	clock := limitertest.NewClock(limitertest.T0)
	c, err := New(Config{Policy: &policy.Policy{Name: "p", Limit: 1, Window: time.Hour},
		Options: &Options{DenyCache: true}, Store: sharedStore{NewMemory(MemoryConfig{})}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	h, err := keyhash.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range n {
		key := h.Hash("p", []byte{byte(i), byte(i >> 8), byte(i >> 16)})
		if d, err := c.Allow(ctx, edgelimit.Request{Key: key}); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("Allow(key %d) = %+v, %v; want allowed with nothing left", i, d, err)
		}
	}
	if got := c.deny.len(); got != n {
		t.Errorf("deny cache holds %d of %d keys that have nothing left, want all", got, n)
	}
}
