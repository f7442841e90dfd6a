package kvbucket

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit"
)

// TestStaleDenialIsReadAgain pins the stale re-check at fixed instants: a
// denial the local state proves stays local (no KV call) while what the
// instance knows of the KV is less than a sync interval old, even when
// another instance gave tokens back meanwhile; once it is a sync interval
// old, the denial is read again (one strong Get) and the fresh state
// decides. A failed re-read keeps the denial and the key is not read again
// for a sync interval. Before, a local denial was never read again while
// the instance held no unwritten changes: an operator's Reset or Grant on
// another instance never reached an instance that kept denying the key.
func TestStaleDenialIsReadAgain(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		pol := kvPolicy("stale", 2, 2, time.Hour, time.Second)
		at := func(d time.Duration) { clk.Set(t0.Add(d)) }
		t.Run("fresh state decides", func(t *testing.T) {
			at(0)
			kv := &faultKV{KV: k.kv}
			a := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
			other := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			req := edgelimit.Request{Key: "k"}
			calls := func(what string, allowed bool, gets, updates int64) {
				t.Helper()
				d, err := a.Allow(ctx, req)
				if err != nil || d.Allowed != allowed {
					t.Fatalf("%s at t0+%s: %+v, %v; want allowed=%v", what, clk.Now().Sub(t0), d, err, allowed)
				}
				if g, u := kv.gets.Load(), kv.updates.Load(); g != gets || u != updates {
					t.Errorf("%s at t0+%s: %d gets, %d updates in all; want %d, %d", what, clk.Now().Sub(t0), g, u, gets, updates)
				}
			}
			calls("first", true, 1, 1)
			calls("second", true, 1, 2)
			calls("empty", false, 1, 2) // the local state proves it
			at(500 * time.Millisecond)
			calls("still empty", false, 1, 2)
			// Another instance gives both tokens back (as an operator's
			// Reset would make the bucket full).
			at(600 * time.Millisecond)
			if err := other.RefundAt(ctx, clk.Now(), edgelimit.Request{Key: "k", Cost: 2}); err != nil {
				t.Fatal(err)
			}
			if got := tokensIn(t, k.kv, a, "k", clk.Now()); got != 2 {
				t.Fatalf("the KV holds %d tokens after the refund, want 2", got)
			}
			at(999 * time.Millisecond)
			calls("fresh denial", false, 1, 2) // learned at t0: not yet stale
			at(time.Second)
			// One read, then the fresh state decides: a sync (one write).
			calls("stale denial read again", true, 2, 3)
		})
		t.Run("a failed read keeps the denial", func(t *testing.T) {
			at(0)
			kv := &faultKV{KV: k.kv}
			a := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
			other := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			req := edgelimit.Request{Key: "f"}
			for range 2 {
				if d, err := a.Allow(ctx, req); err != nil || !d.Allowed {
					t.Fatalf("spend: %+v, %v", d, err)
				}
			}
			if err := other.RefundAt(ctx, clk.Now(), edgelimit.Request{Key: "f", Cost: 2}); err != nil {
				t.Fatal(err)
			}
			kv.failGets(errBroken)
			deny := func(what string, gets int64) {
				t.Helper()
				d, err := a.Allow(ctx, req)
				if err != nil || d.Allowed {
					t.Errorf("%s at t0+%s: %+v, %v; want the local denial", what, clk.Now().Sub(t0), d, err)
				}
				if g := kv.gets.Load(); g != gets {
					t.Errorf("%s at t0+%s: %d gets in all, want %d", what, clk.Now().Sub(t0), g, gets)
				}
			}
			at(time.Second)
			deny("re-read fails", 2)
			at(1500 * time.Millisecond)
			deny("within a sync interval of the failed read", 2)
			at(1999 * time.Millisecond)
			deny("just before", 2)
			kv.getErr.Store(nil)
			at(2 * time.Second)
			if d, err := a.Allow(ctx, req); err != nil || !d.Allowed || kv.gets.Load() != 3 {
				t.Errorf("a sync interval after the failed read: %+v, %v, %d gets; want allowed after a third read", d, err, kv.gets.Load())
			}
			if st := a.Stats(); st.Errors != 1 {
				t.Errorf("Stats.Errors = %d, want 1", st.Errors)
			}
		})
	})
}

// TestReset pins Bucket.Reset at fixed instants on memory, dynalite and
// moto: the bucket is full again from the reset's instant for every
// instance that reads it; the resetting instance's own next decision sees
// it at once (its unwritten spending is forgotten); another instance with
// unwritten spending from before the reset learns of it within a sync
// interval, and that spending, written after the reset, counts against the
// full bucket. Before, kv had no Reset: the engine's Reset of a kv policy
// failed, and the key waited out its refill.
func TestReset(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		pol := kvPolicy("reset", 10, 10, time.Hour, time.Second)
		at := func(d time.Duration) { clk.Set(t0.Add(d)) }
		allow := func(b *Bucket, key string, cost int64, allowed bool, remaining int64) {
			t.Helper()
			d, err := b.Allow(ctx, edgelimit.Request{Key: key, Cost: cost})
			if err != nil || d.Allowed != allowed || d.Remaining != remaining {
				t.Errorf("Allow(%q, %d) at t0+%s = %+v, %v; want allowed=%v, %d left", key, cost, clk.Now().Sub(t0), d, err, allowed, remaining)
			}
		}
		tokens := func(b *Bucket, key string, want int64) {
			t.Helper()
			if got := tokensIn(t, k.kv, b, key, clk.Now()); got != want {
				t.Errorf("at t0+%s the KV holds %d tokens of %q, want %d", clk.Now().Sub(t0), got, key, want)
			}
		}
		t.Run("here", func(t *testing.T) {
			at(0)
			a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			allow(a, "h", 1, true, 9) // probation: written through
			at(time.Second)
			allow(a, "h", 1, true, 8) // a sync: the whole bucket is a's share
			at(1500 * time.Millisecond)
			allow(a, "h", 8, true, 0) // local, unwritten
			allow(a, "h", 1, false, 0)
			if err := a.Reset(ctx, edgelimit.Request{Key: "h", At: clk.Now()}); err != nil {
				t.Fatal(err)
			}
			tokens(a, "h", 10)
			// At once, and the 8 unwritten are forgotten, not written later.
			allow(a, "h", 1, true, 9)
			at(3 * time.Second)
			allow(a, "h", 1, true, 8)
			tokens(a, "h", 8)
		})
		t.Run("elsewhere", func(t *testing.T) {
			at(0)
			a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			op := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now}) // the operator's instance
			allow(a, "e", 1, true, 9)
			at(time.Second)
			allow(a, "e", 1, true, 8)
			at(1500 * time.Millisecond)
			allow(a, "e", 8, true, 0) // local, unwritten
			tokens(a, "e", 8)
			if err := op.Reset(ctx, edgelimit.Request{Key: "e", At: clk.Now()}); err != nil {
				t.Fatal(err)
			}
			tokens(a, "e", 10)
			at(1600 * time.Millisecond)
			allow(a, "e", 1, false, 0) // a's share is of the bucket before
			// A sync interval after a's last sync: its 8 unwritten tokens
			// are written after the reset and count; the request is decided
			// from the answer.
			at(2 * time.Second)
			allow(a, "e", 1, true, 1)
			tokens(a, "e", 2) // 10 − 8 − 1 written, the last one local
		})
		t.Run("a denying instance", func(t *testing.T) {
			at(0)
			a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			op := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			allow(a, "d", 10, true, 0)
			allow(a, "d", 1, false, 0)
			at(200 * time.Millisecond)
			if err := op.Reset(ctx, edgelimit.Request{Key: "d", At: clk.Now()}); err != nil {
				t.Fatal(err)
			}
			at(900 * time.Millisecond)
			allow(a, "d", 1, false, 0) // a knows the KV as of t0: fresh enough
			at(time.Second)
			allow(a, "d", 1, true, 9) // read again: the reset
		})
		t.Run("missing state", func(t *testing.T) {
			at(0)
			a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			if err := a.Reset(ctx, edgelimit.Request{Key: "never", At: clk.Now()}); err != nil {
				t.Fatal(err)
			}
			allow(a, "never", 1, true, 9)
		})
	})
}

// TestResetAcrossRegions: a region writes only its own part, yet its
// reset makes the bucket full as every region reads it (this region's
// part lowers what it counts as spent until no region's term of the
// bucket's TAT passes the instant), and what any region spends after it
// counts.
func TestResetAcrossRegions(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		if k.region == nil {
			t.Skip("regions are DynamoDB's")
		}
		clk.Set(t0)
		pol := kvPolicy("reset-regions", 10, 10, time.Hour, time.Second)
		kva, kvb := k.region("a"), k.region("b")
		a := mustNew(t, Config{Policy: pol, KV: kva, Now: clk.Now})
		b := mustNew(t, Config{Policy: pol, KV: kvb, Now: clk.Now})
		read := func(what string, want int64) {
			t.Helper()
			if ga, gb := tokensIn(t, kva, a, "r", clk.Now()), tokensIn(t, kvb, b, "r", clk.Now()); ga != want || gb != want {
				t.Errorf("%s: region a reads %d tokens, b %d; want %d each", what, ga, gb, want)
			}
		}
		spend := func(x *Bucket, c int64) {
			t.Helper()
			if d, err := x.Allow(ctx, edgelimit.Request{Key: "r", Cost: c}); err != nil || !d.Allowed {
				t.Fatalf("spend %d: %+v, %v", c, d, err)
			}
		}
		// a spends first, then b (b's raise is against a's spending), then
		// a again (a's addition counts in b's term through a's Spent).
		spend(a, 3)
		spend(b, 4)
		spend(a, 1)
		read("before the reset", 2)
		if err := a.Reset(ctx, edgelimit.Request{Key: "r", At: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		read("after region a's reset", 10)
		spend(b, 3)
		read("b spends 3 after it", 7)
		spend(a, 2)
		read("a spends 2", 5)
		if err := b.Reset(ctx, edgelimit.Request{Key: "r", At: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		read("after region b's reset", 10)
	})
}

// TestCharge pins Bucket.Charge at fixed instants on memory, dynalite and
// moto: a charge spends whether or not it fits; the bucket goes into debt
// (at most one bucket), later requests are denied (r=0, the wait until a
// token is back) until refill repays it, on this instance and on another
// that reads the KV; a charge with the key's share in the cache is local
// and reaches the KV with the next sync. Before, kv had no Charge: the
// engine refused a kv policy that charges after the response.
func TestCharge(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		// 10 an hour: a token every 6 minutes.
		pol := kvPolicy("charge", 10, 10, time.Hour, time.Second)
		at := func(d time.Duration) { clk.Set(t0.Add(d)) }
		type want struct {
			allowed      bool
			remaining    int64
			reset, retry time.Duration
		}
		check := func(what string, d edgelimit.Decision, err error, w want) {
			t.Helper()
			if got := (want{d.Allowed, d.Remaining, d.Reset, d.RetryAfter}); err != nil || got != w {
				t.Errorf("%s at t0+%s: %+v, %v; want %+v", what, clk.Now().Sub(t0), got, err, w)
			}
		}
		t.Run("debt", func(t *testing.T) {
			at(0)
			a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			other := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			d, err := a.Allow(ctx, edgelimit.Request{Key: "d", Cost: 4})
			check("allow 4", d, err, want{true, 6, 6 * time.Minute, 0})
			d, err = a.Charge(ctx, edgelimit.Request{Key: "d", Cost: 10})
			// 4 tokens in debt: the next whole token is 5 tokens away.
			check("charge 10", d, err, want{false, 0, 30 * time.Minute, 30 * time.Minute})
			if got := tokensIn(t, k.kv, a, "d", clk.Now()); got != 0 {
				t.Errorf("the KV holds %d tokens, want 0 (in debt)", got)
			}
			d, err = a.Allow(ctx, edgelimit.Request{Key: "d"})
			check("allow after", d, err, want{false, 0, 30 * time.Minute, 30 * time.Minute})
			at(time.Minute)
			d, err = other.Allow(ctx, edgelimit.Request{Key: "d"})
			check("another instance", d, err, want{false, 0, 29 * time.Minute, 29 * time.Minute})
			at(29*time.Minute + 59*time.Second)
			d, err = a.Allow(ctx, edgelimit.Request{Key: "d"})
			check("not yet repaid", d, err, want{false, 0, time.Second, time.Second})
			at(30 * time.Minute)
			d, err = a.Allow(ctx, edgelimit.Request{Key: "d"})
			check("repaid", d, err, want{true, 0, 6 * time.Minute, 0})
		})
		t.Run("at most a bucket of debt", func(t *testing.T) {
			at(0)
			a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			d, err := a.Charge(ctx, edgelimit.Request{Key: "m", Cost: 100})
			// Ten tokens in debt: the next whole token is 11 away (66m).
			check("charge 100", d, err, want{false, 0, 66 * time.Minute, 66 * time.Minute})
			at(65 * time.Minute)
			d, err = a.Allow(ctx, edgelimit.Request{Key: "m"})
			check("still in debt", d, err, want{false, 0, time.Minute, time.Minute})
			at(66 * time.Minute)
			d, err = a.Allow(ctx, edgelimit.Request{Key: "m"})
			check("repaid", d, err, want{true, 0, 6 * time.Minute, 0})
		})
		t.Run("cached", func(t *testing.T) {
			at(0)
			a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			d, err := a.Allow(ctx, edgelimit.Request{Key: "c"})
			check("probation", d, err, want{true, 9, 6 * time.Minute, 0})
			at(time.Second)
			d, err = a.Allow(ctx, edgelimit.Request{Key: "c"})
			check("sync", d, err, want{true, 8, 6*time.Minute - time.Second, 0})
			at(1500 * time.Millisecond)
			d, err = a.Charge(ctx, edgelimit.Request{Key: "c", Cost: 3})
			check("local charge", d, err, want{true, 5, 6*time.Minute - 1500*time.Millisecond, 0})
			if got := tokensIn(t, k.kv, a, "c", clk.Now()); got != 8 {
				t.Errorf("before the next sync the KV holds %d tokens, want 8", got)
			}
			at(2 * time.Second)
			d, err = a.Allow(ctx, edgelimit.Request{Key: "c"})
			check("next sync", d, err, want{true, 4, 6*time.Minute - 2*time.Second, 0})
			if got := tokensIn(t, k.kv, a, "c", clk.Now()); got != 4 {
				t.Errorf("after it the KV holds %d tokens, want 4", got)
			}
		})
	})
}

// TestGrant pins Bucket.Grant at fixed instants on memory, dynalite and
// moto: a grant's tokens come beyond the bucket's capacity, usable at once;
// the instance that grants honours it at once, another within a sync
// interval; across instances no token of it is spent twice (each one a
// conditional write); it lapses at its end; grants in force add up; an
// end that has passed is refused. Before, kv had no Grant: the engine's
// Grant of a kv policy failed.
func TestGrant(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		// 2 an hour, burst 2: a token every 30 minutes, full in an hour.
		pol := kvPolicy("grant", 2, 2, time.Hour, time.Second)
		at := func(d time.Duration) { clk.Set(t0.Add(d)) }
		allow := func(b *Bucket, key string, allowed bool, remaining int64) edgelimit.Decision {
			t.Helper()
			d, err := b.Allow(ctx, edgelimit.Request{Key: key})
			if err != nil || d.Allowed != allowed || d.Remaining != remaining {
				t.Errorf("Allow(%q) at t0+%s = %+v, %v; want allowed=%v, %d left", key, clk.Now().Sub(t0), d, err, allowed, remaining)
			}
			return d
		}
		grant := func(b *Bucket, key string, units int64, until time.Time) error {
			t.Helper()
			return b.Grant(ctx, edgelimit.Request{Key: key, At: clk.Now()}, units, until)
		}
		left := func(b *Bucket, key string) (int64, time.Duration) {
			t.Helper()
			tally, err := k.kv.get(ctx, b.prefix+key, wire.Strong)
			if err != nil {
				t.Fatal(err)
			}
			return tally.Own.GrantLeft, time.Unix(0, tally.Own.GrantUntil).Sub(t0)
		}
		t.Run("once across instances", func(t *testing.T) {
			at(0)
			a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			c := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			op := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			allow(a, "g", true, 1)
			allow(a, "g", true, 0)
			allow(a, "g", false, 0)
			at(100 * time.Millisecond)
			if err := grant(op, "g", 3, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if g, end := left(op, "g"); g != 3 || end != time.Hour+100*time.Millisecond {
				t.Errorf("the KV holds a grant of %d until t0+%s, want 3 until t0+1h0.1s (one fill time)", g, end)
			}
			at(200 * time.Millisecond)
			allow(a, "g", false, 0) // a's knowledge is fresh: the grant reaches it within a sync interval
			allow(c, "g", true, 2)  // new to c: read, and the grant pays (2 of it left, shown within q=2)
			at(time.Second)
			allow(a, "g", true, 1) // read again: 1 left
			allow(a, "g", true, 0)
			allow(a, "g", false, 0) // a knows it is spent: no write
			allow(c, "g", false, 0) // c thinks 2 are left: its conditional write is refused
			if g, _ := left(op, "g"); g != 0 {
				t.Errorf("the grant holds %d, want 0: 3 spent, once each", g)
			}
			d, err := c.Peek(ctx, edgelimit.Request{Key: "g"})
			if err != nil || d.Allowed {
				t.Errorf("Peek after the grant is spent: %+v, %v; want denied", d, err)
			}
		})
		t.Run("beyond the capacity, then lapses", func(t *testing.T) {
			at(0)
			a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			allow(a, "l", true, 1) // a knows the key
			if err := grant(a, "l", 5, t0.Add(10*time.Minute)); err != nil {
				t.Fatal(err)
			}
			// The bucket's last token and then the grant's, at once.
			allow(a, "l", true, 2)
			d := allow(a, "l", true, 2) // 3 of the grant left
			if err := a.Refund(ctx, edgelimit.Request{Key: "l"}, d); err != nil {
				t.Errorf("Refund of a request the grant paid: %v, want nil (nothing given back)", err)
			}
			if g, _ := left(a, "l"); g != 4 {
				t.Errorf("after the refund the grant holds %d, want 4", g)
			}
			at(10*time.Minute - time.Nanosecond)
			if d, err := a.Peek(ctx, edgelimit.Request{Key: "l"}); err != nil || !d.Allowed {
				t.Errorf("Peek before the end: %+v, %v; want allowed", d, err)
			}
			at(10 * time.Minute)
			allow(a, "l", false, 0) // lapsed, 4 unused; a third of a token refilled
			if err := grant(a, "l", 1, t0.Add(10*time.Minute)); !errors.Is(err, ErrGrant) {
				t.Errorf("a grant until its own instant: %v, want ErrGrant", err)
			}
			if err := grant(a, "l", 0, time.Time{}); !errors.Is(err, ErrGrant) {
				t.Errorf("a grant of 0: %v, want ErrGrant", err)
			}
		})
		t.Run("grants add up", func(t *testing.T) {
			at(0)
			a := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			if err := grant(a, "s", 2, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if err := grant(a, "s", 3, t0.Add(30*time.Minute)); err != nil {
				t.Fatal(err)
			}
			if g, end := left(a, "s"); g != 5 || end != time.Hour {
				t.Errorf("two grants in force: %d until t0+%s, want 5 until t0+1h", g, end)
			}
			if err := grant(a, "s", 1, t0.Add(90*time.Minute)); err != nil {
				t.Fatal(err)
			}
			if g, end := left(a, "s"); g != 6 || end != 90*time.Minute {
				t.Errorf("a third, ending later: %d until t0+%s, want 6 until t0+1h30m", g, end)
			}
			at(2 * time.Hour)
			if err := grant(a, "s", 1, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if g, end := left(a, "s"); g != 1 || end != 3*time.Hour {
				t.Errorf("a grant after the others lapsed: %d until t0+%s, want 1 until t0+3h (the lapsed 6 are gone)", g, end)
			}
		})
	})
}

// TestGrantIsSpentOnceUnderConcurrency: 16 instances, each on its own
// goroutines (4 each, 5 requests apiece), ask for a key whose bucket is
// empty and which holds a grant of 10, on memory, dynalite and moto:
// exactly 10 are admitted, each by one conditional write, whatever the
// interleaving (a token of a grant is never spent twice).
func TestGrantIsSpentOnceUnderConcurrency(t *testing.T) {
	forEachKV(t, func(t *testing.T, k kvUnderTest, clk *clock) {
		clk.Set(t0)
		pol := kvPolicy("grant-race", 2, 2, time.Hour, time.Second)
		op := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
		for range 2 {
			if d, err := op.Allow(ctx, edgelimit.Request{Key: "k"}); err != nil || !d.Allowed {
				t.Fatalf("empty the bucket: %+v, %v", d, err)
			}
		}
		if err := op.Grant(ctx, edgelimit.Request{Key: "k", At: clk.Now()}, 10, time.Time{}); err != nil {
			t.Fatal(err)
		}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			b := mustNew(t, Config{Policy: pol, KV: k.kv, Now: clk.Now})
			for range 4 {
				wg.Go(func() {
					for range 5 {
						d, err := b.Allow(ctx, edgelimit.Request{Key: "k"})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
		if got := admitted.Load(); got != 10 {
			t.Errorf("%d admitted over 16 instances, want exactly the grant's 10", got)
		}
	})
}
