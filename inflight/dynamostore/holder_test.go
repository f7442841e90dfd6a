package dynamostore

import (
	"testing"

	"github.com/edgelimit/edgelimit/inflight/internal/wire"
)

// TestHolderNames: a holder's units round-trip through its attribute's
// name, and no other attribute of the item reads as a holder.
func TestHolderNames(t *testing.T) {
	id := wire.SlotID{1, 2, 3}
	for _, u := range []int64{1, 2, 3, 10, 9999} {
		name := holderAttr(id, u)
		if got, ok := holderUnits(name); !ok || got != u {
			t.Errorf("holderUnits(%q) = %d, %v; want %d", name, got, ok, u)
		}
	}
	if name := holderAttr(id, 1); name != "h_"+id.String() {
		t.Errorf("a holder of one slot is %q, want h_<id> (as before costs)", name)
	}
	for _, name := range []string{"n", "pk", "expires_at", "h", "h3", "hx_a", "h0_a", "h1_a", "h03_a", "3_a", "h-3_a", "h99999999999999999999_a"} {
		if u, ok := holderUnits(name); ok {
			t.Errorf("holderUnits(%q) = %d, a holder; want none", name, u)
		}
	}
}
