// Package cidrset is a set of address ranges (an address list's CIDRs),
// merged and sorted: membership is a binary search.
package cidrset

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
	"sort"
)

// Set is a set of address ranges, merged and sorted, one slice per family:
// membership is a binary search, so thousands of CIDRs cost a dozen
// comparisons.
type Set struct {
	v4 []span32
	v6 []span128
}

type span32 struct{ lo, hi uint32 }

type u128 struct{ hi, lo uint64 }

type span128 struct{ lo, hi u128 }

func cmp128(a, b u128) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

// New returns the set of the addresses in pfxs.
func New(pfxs []netip.Prefix) *Set {
	s := &Set{}
	for _, p := range pfxs {
		a := p.Addr()
		if a.Is4() {
			b := a.As4()
			lo := binary.BigEndian.Uint32(b[:])
			size := uint32(1)<<(32-p.Bits()) - 1
			if p.Bits() == 0 {
				size = ^uint32(0)
			}
			s.v4 = append(s.v4, span32{lo, lo | size})
			continue
		}
		b := a.As16()
		lo := u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
		hi := lo
		host := 128 - p.Bits()
		switch {
		case host >= 64:
			hi.lo = ^uint64(0)
			if host == 128 {
				hi.hi = ^uint64(0)
			} else {
				hi.hi |= uint64(1)<<(host-64) - 1
			}
		case host > 0:
			hi.lo |= uint64(1)<<host - 1
		}
		s.v6 = append(s.v6, span128{lo, hi})
	}
	// sort.Slice, not slices.SortFunc: once, when a list is compiled, and
	// its code is shared by every caller in a program (the Lambda
	// functions' runtime links it anyway), where each slices.SortFunc
	// instantiation is about 5 KB of each bootstrap.
	sort.Slice(s.v4, func(i, j int) bool { return s.v4[i].lo < s.v4[j].lo })
	sort.Slice(s.v6, func(i, j int) bool { return cmp128(s.v6[i].lo, s.v6[j].lo) < 0 })
	// Merge overlapping spans, so that a search finds the only candidate.
	var v4 []span32
	for _, sp := range s.v4 {
		if n := len(v4); n > 0 && sp.lo <= v4[n-1].hi {
			v4[n-1].hi = max(v4[n-1].hi, sp.hi)
			continue
		}
		v4 = append(v4, sp)
	}
	var v6 []span128
	for _, sp := range s.v6 {
		if n := len(v6); n > 0 && cmp128(sp.lo, v6[n-1].hi) <= 0 {
			if cmp128(sp.hi, v6[n-1].hi) > 0 {
				v6[n-1].hi = sp.hi
			}
			continue
		}
		v6 = append(v6, sp)
	}
	s.v4, s.v6 = v4, v6
	return s
}

// Contains reports whether a is in the set.
func (s *Set) Contains(a netip.Addr) bool {
	if a.Is4() {
		b := a.As4()
		x := binary.BigEndian.Uint32(b[:])
		i, _ := slices.BinarySearchFunc(s.v4, x, func(sp span32, x uint32) int {
			if sp.hi < x {
				return -1
			}
			if sp.lo > x {
				return 1
			}
			return 0
		})
		return i < len(s.v4) && s.v4[i].lo <= x && x <= s.v4[i].hi
	}
	b := a.As16()
	x := u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
	i, _ := slices.BinarySearchFunc(s.v6, x, func(sp span128, x u128) int {
		if cmp128(sp.hi, x) < 0 {
			return -1
		}
		if cmp128(sp.lo, x) > 0 {
			return 1
		}
		return 0
	})
	return i < len(s.v6) && cmp128(s.v6[i].lo, x) <= 0 && cmp128(x, s.v6[i].hi) <= 0
}
