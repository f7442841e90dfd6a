package cidrset_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/edgelimit/edgelimit/internal/cidrset"
	"github.com/edgelimit/edgelimit/policy"
)

// newSet builds a list's address set from CIDRs and addresses as the
// engine does, and returns its membership test.
func newSet(t *testing.T, values []string) func(netip.Addr) bool {
	t.Helper()
	var pfxs []netip.Prefix
	for _, v := range values {
		p, err := policy.ParseCIDR(v)
		if err != nil {
			t.Fatal(err)
		}
		pfxs = append(pfxs, p)
	}
	return cidrset.New(pfxs).Contains
}

// TestCIDRSetMatchesNetip compares the merged-span set with netip's own
// Prefix.Contains over random prefixes and addresses, both families.
func TestCIDRSetMatchesNetip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		var pfxs []netip.Prefix
		var values []string
		for i := 0; i < 1+rng.IntN(60); i++ {
			p := randomPrefix(rng)
			pfxs = append(pfxs, p)
			values = append(values, p.String())
		}
		set := newSet(t, values)
		for i := 0; i < 2000; i++ {
			var a netip.Addr
			if i%3 == 0 {
				// Near a prefix's edges, where off-by-one errors live.
				a = edge(pfxs[rng.IntN(len(pfxs))], rng)
			} else {
				a = randomPrefix(rng).Addr()
			}
			want := false
			for _, p := range pfxs {
				want = want || p.Contains(a)
			}
			if got := set(a); got != want {
				t.Fatalf("round %d: %s in %v: got %v, want %v", round, a, pfxs, got, want)
			}
		}
	}
}

func randomPrefix(rng *rand.Rand) netip.Prefix {
	if rng.IntN(2) == 0 {
		var b [4]byte
		for i := range b {
			b[i] = byte(rng.IntN(4)) // a small space, so prefixes overlap
		}
		return netip.PrefixFrom(netip.AddrFrom4(b), rng.IntN(33)).Masked()
	}
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.IntN(3))
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), rng.IntN(129)).Masked()
}

// edge returns an address just inside or just outside p.
func edge(p netip.Prefix, rng *rand.Rand) netip.Addr {
	a := p.Addr()
	switch rng.IntN(4) {
	case 0:
		return a
	case 1:
		if pr := a.Prev(); pr.IsValid() {
			return pr
		}
		return a
	default:
		// The last address of p, or the one after it.
		last := a
		bits := a.BitLen() - p.Bits()
		b := a.AsSlice()
		for i := 0; i < bits; i++ {
			b[len(b)-1-i/8] |= 1 << (i % 8)
		}
		last, _ = netip.AddrFromSlice(b)
		if rng.IntN(2) == 0 {
			return last
		}
		if n := last.Next(); n.IsValid() {
			return n
		}
		return last
	}
}
