package kvbucket

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit"
)

// TestWideArithmetic checks Wide against math/big on random values of the
// magnitudes a state has (up to about 2^100, either sign).
func TestWideArithmetic(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rnd := func() (wire.Wide, *big.Int) {
		a := rng.Int64()
		b := rng.Int64N(1 << 40)
		if rng.IntN(2) == 0 {
			b = -b
		}
		if rng.IntN(4) == 0 {
			return wire.WideOf(a), big.NewInt(a)
		}
		return wire.Mul(a, b), new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	}
	for range 20000 {
		x, bx := rnd()
		y, by := rnd()
		if got := x.Add(y).Big(); got.Cmp(new(big.Int).Add(bx, by)) != 0 {
			t.Fatalf("%s + %s = %s", bx, by, got)
		}
		if got := x.Sub(y).Big(); got.Cmp(new(big.Int).Sub(bx, by)) != 0 {
			t.Fatalf("%s - %s = %s", bx, by, got)
		}
		if x.Cmp(y) != bx.Cmp(by) {
			t.Fatalf("Cmp(%s, %s) = %d", bx, by, x.Cmp(y))
		}
		if x.Sign() != bx.Sign() {
			t.Fatalf("Sign(%s) = %d", bx, x.Sign())
		}
		if w, err := wire.ParseWide(x.String()); err != nil || w != x {
			t.Fatalf("ParseWide(%s) = %v, %v", x, w, err)
		}
		d := rng.Int64N(math.MaxInt64) + 1
		for _, up := range []bool{false, true} {
			q := new(big.Int)
			m := new(big.Int)
			q.DivMod(bx, big.NewInt(d), m) // Euclidean: floor for d > 0
			if up && m.Sign() != 0 {
				q.Add(q, big.NewInt(1))
			}
			want := q.Int64()
			if !q.IsInt64() {
				want = math.MaxInt64
				if q.Sign() < 0 {
					want = math.MinInt64
				}
			}
			if got := x.Div(d, up); got != want {
				t.Fatalf("%s / %d (up %v) = %d, want %d", bx, d, up, got, want)
			}
		}
		k := rng.Int64N(1000) + 1
		if got := mulK(x, k).Big(); got.Cmp(new(big.Int).Mul(bx, big.NewInt(k))) != 0 {
			t.Fatalf("%s × %d = %s", bx, k, got)
		}
	}
	for _, bad := range []string{"", "1.5", "1e3", "0x10", "1" + string(make([]byte, 0)) + "00000000000000000000000000000000000000000"} {
		if _, err := wire.ParseWide(bad); err == nil {
			t.Errorf("ParseWide(%q) succeeded", bad)
		}
	}
}

// TestOpsCompose: a sequence of spends, refunds and undos folded into one
// op (what an instance writes in one update) changes a TAT exactly as the
// sequence applied one by one would, from any TAT.
func TestOpsCompose(t *testing.T) {
	u := newUnits(Params{Capacity: 7, Limit: 3, Window: time.Second})
	rng := rand.New(rand.NewPCG(7, 8))
	n0 := t0.UnixNano()
	for range 2000 {
		var ops []op
		n := n0
		for range rng.IntN(8) + 1 {
			n += rng.Int64N(int64(2 * time.Second))
			c := rng.Int64N(3) + 1
			switch rng.IntN(4) {
			case 0:
				ops = append(ops, u.refund(n, c))
			case 1:
				ops = append(ops, u.undo(c))
			default:
				ops = append(ops, u.spend(n, c))
			}
		}
		var folded op
		for _, o := range ops {
			folded = folded.then(o)
		}
		for _, start := range []wire.Wide{wire.NegInf, u.at(n0 - int64(time.Hour)), u.at(n0), u.at(n0 + int64(3*time.Second))} {
			seq := start
			for _, o := range ops {
				seq = o.apply(seq)
			}
			if got := folded.apply(start); got != seq {
				t.Fatalf("folded %d ops from %s: %s, one by one %s", len(ops), start, got, seq)
			}
		}
	}
}

// TestRegionsSumParts: the bucket's TAT over regions, each holding its own
// part, is the TAT of every region's spending together; a raise in one
// region (its bucket had refilled) charges the others' later spending on
// top of it, never forgets it.
func TestRegionsSumParts(t *testing.T) {
	u := newUnits(Params{Capacity: 5, Limit: 1, Window: time.Second}) // a token a second
	n := t0.UnixNano()
	sec := int64(time.Second)
	var a, b view // a's and b's views, each with the other's part up to date
	apply := func(v *view, other *view, o op, at int64) {
		up := v.update(&u, o, at, false)
		p := v.own
		if !p.Has || up.HasFloor && p.TAT.Less(up.Floor) {
			p.TAT = up.Floor.Add(up.Add)
		} else {
			p.TAT = p.TAT.Add(up.Add)
		}
		p.Has = true
		p.Spent += up.Spent
		v.own = p
		other.setOthers(&u, []wire.Part{p})
	}
	// Region a spends 2 at n, region b 1 at n: 3 spent in all.
	apply(&a, &b, u.spend(n, 2), n)
	apply(&b, &a, u.spend(n, 1), n)
	for name, v := range map[string]*view{"a": &a, "b": &b} {
		if got := u.avail(v.tat(&u), n).Div(u.w, false); got != 2 {
			t.Errorf("%s sees %d tokens, want 2 (5 less 3 spent in both regions)", name, got)
		}
	}
	// 10s later the bucket is full; a raises, b spends on top.
	apply(&a, &b, u.spend(n+10*sec, 1), n+10*sec)
	apply(&b, &a, u.spend(n+10*sec, 3), n+10*sec)
	for name, v := range map[string]*view{"a": &a, "b": &b} {
		if got := u.avail(v.tat(&u), n+10*sec).Div(u.w, false); got != 1 {
			t.Errorf("%s sees %d tokens after the refill, want 1 (5 less 1 and 3)", name, got)
		}
	}
}

// TestSharedDecisionsInRange: every decision on the share path reports a
// Remaining within the quota and a RetryAfter no earlier than Reset.
func TestSharedDecisionsInRange(t *testing.T) {
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{Now: clk.Now})
	pol := kvPolicy("range", 7, 12, 3*time.Second, 500*time.Millisecond)
	var inst []*Bucket
	for range 5 {
		inst = append(inst, mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now}))
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 20000 {
		clk.Add(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
		b := inst[rng.IntN(len(inst))]
		req := edgelimit.Request{Key: "k", Cost: rng.Int64N(4)}
		d, err := b.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining > d.Limit || d.Remaining < 0 || d.Reset <= 0 || !d.Allowed && d.RetryAfter < d.Reset {
			t.Fatalf("step %d: %+v", i, d)
		}
		if d.Allowed && rng.IntN(10) == 0 {
			if err := b.Refund(ctx, req, d); err != nil {
				t.Fatal(err)
			}
		}
	}
}
