package wire

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
)

// Wide is a signed 128-bit integer: a bucket's theoretical arrival time in
// bucket units (nanoseconds × Limit, so that one token is exactly Window
// units and refill is exact). An instant of 2025 is about 1.7e18 ns, times a
// Limit of up to a billion: more than 64 bits, far less than 127. The zero
// value is 0. KV implementations store it as a decimal number (DynamoDB's
// numbers hold 38 digits) and need only Add, Cmp, String and ParseWide.
// durablecounter's GCRA needs no Wide: its conditional writes see the
// stored TAT, so int64 nanoseconds suffice (see units, in gcra.go, for why
// the two GCRAs differ).
type Wide struct {
	hi int64
	lo uint64
}

// NegInf stands for "no state yet" (a full bucket) in comparisons: far
// below any real value, and adding any real value leaves it far below.
var NegInf = Wide{hi: -1 << 60}

// WideOf returns v as a Wide.
func WideOf(v int64) Wide {
	return Wide{hi: v >> 63, lo: uint64(v)}
}

// Mul returns a×b.
func Mul(a, b int64) Wide {
	neg := (a < 0) != (b < 0)
	ua, ub := uint64(a), uint64(b)
	if a < 0 {
		ua = -ua
	}
	if b < 0 {
		ub = -ub
	}
	hi, lo := bits.Mul64(ua, ub)
	w := Wide{hi: int64(hi), lo: lo}
	if neg {
		w = w.Neg()
	}
	return w
}

// Add returns w+v.
func (w Wide) Add(v Wide) Wide {
	lo, c := bits.Add64(w.lo, v.lo, 0)
	return Wide{hi: w.hi + v.hi + int64(c), lo: lo}
}

// Sub returns w−v.
func (w Wide) Sub(v Wide) Wide {
	lo, b := bits.Sub64(w.lo, v.lo, 0)
	return Wide{hi: w.hi - v.hi - int64(b), lo: lo}
}

// Neg returns −w.
func (w Wide) Neg() Wide { return Wide{}.Sub(w) }

// Cmp returns -1, 0 or +1 as w is less than, equal to or greater than v.
func (w Wide) Cmp(v Wide) int {
	switch {
	case w.hi < v.hi:
		return -1
	case w.hi > v.hi:
		return 1
	case w.lo < v.lo:
		return -1
	case w.lo > v.lo:
		return 1
	}
	return 0
}

// Less reports w < v.
func (w Wide) Less(v Wide) bool { return w.Cmp(v) < 0 }

// Sign returns -1, 0 or +1.
func (w Wide) Sign() int {
	switch {
	case w.hi < 0:
		return -1
	case w.hi == 0 && w.lo == 0:
		return 0
	}
	return 1
}

// Max returns the larger of a and b.
func Max(a, b Wide) Wide {
	if a.Less(b) {
		return b
	}
	return a
}

// MulSmall returns w×k for w ≥ 0 and k ≥ 0 (no overflow in our ranges).
func (w Wide) MulSmall(k int64) Wide {
	hi, lo := bits.Mul64(w.lo, uint64(k))
	return Wide{hi: w.hi*k + int64(hi), lo: lo}
}

// Div returns w/d rounded down (or up), for d > 0, saturated to
// [MinInt64, MaxInt64]. A negative w rounds towards minus infinity (down)
// or plus infinity (up) as well.
func (w Wide) Div(d int64, up bool) int64 {
	if w.Sign() < 0 {
		// ⌊−x/d⌋ = −⌈x/d⌉, ⌈−x/d⌉ = −⌊x/d⌋.
		q := w.Neg().Div(d, !up)
		if q == math.MaxInt64 {
			return math.MinInt64
		}
		return -q
	}
	if uint64(w.hi) >= uint64(d) {
		return math.MaxInt64
	}
	q, r := bits.Div64(uint64(w.hi), w.lo, uint64(d))
	if up && r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// wideLimit bounds what ParseWide accepts: 2^126, far beyond any state, so
// that sums of a few stored values never overflow.
var wideLimit = new(big.Int).Lsh(big.NewInt(1), 126)

// String returns w in decimal.
func (w Wide) String() string { return w.Big().String() }

// Big returns w as a big.Int.
func (w Wide) Big() *big.Int {
	v := new(big.Int).Lsh(big.NewInt(w.hi), 64)
	return v.Add(v, new(big.Int).SetUint64(w.lo))
}

// ParseWide parses a decimal integer within ±2^126.
func ParseWide(s string) (Wide, error) {
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return Wide{}, fmt.Errorf("%.40q is not an integer", s)
	}
	if v.CmpAbs(wideLimit) > 0 {
		return Wide{}, fmt.Errorf("%.40q is out of range", s)
	}
	if v.Sign() < 0 {
		v.Add(v, new(big.Int).Lsh(big.NewInt(1), 128))
	}
	mask := new(big.Int).SetUint64(math.MaxUint64)
	lo := new(big.Int).And(v, mask).Uint64()
	hi := new(big.Int).Rsh(v, 64).Uint64()
	return Wide{hi: int64(hi), lo: lo}, nil
}
