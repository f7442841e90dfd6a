package kvbucket

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/kvbucket/internal/wire"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/ddbtest"
)

// TestResetIsTheEffectiveWindow pins issue #10's item 6 for kv: Reset was
// the time until the bucket is full again, so allowed responses of a policy
// of 8 per 96s counted t up 12, 24 … 96 although the next token always
// comes back in 12s, and the 429 said Retry-After 12 with t=96. Reset is
// now draft-11's effective window: the time until the next token.
func TestResetIsTheEffectiveWindow(t *testing.T) {
	clk := newClock(t0)
	b := mustNew(t, Config{Policy: kvPolicy("t", 8, 8, 96*time.Second, 0), KV: NewMemory(MemoryConfig{Now: clk.Now}), Now: clk.Now})
	req := edgelimit.Request{Key: "k"}
	for i := range 8 {
		d, err := b.Allow(ctx, req)
		if err != nil || !d.Allowed || d.Reset != 12*time.Second {
			t.Errorf("Allow #%d = %+v, %v; want allowed with Reset 12s", i+1, d, err)
		}
	}
	d, _ := b.Allow(ctx, req)
	if d.Allowed || d.Reset != 12*time.Second || d.RetryAfter != 12*time.Second {
		t.Errorf("Allow #9 = %+v; want denied, Reset and RetryAfter 12s", d)
	}
	clk.Add(6 * time.Second) // half a token back
	if d, _ = b.Allow(ctx, req); d.Allowed || d.Reset != 6*time.Second || d.RetryAfter != 6*time.Second {
		t.Errorf("Allow 6s later = %+v; want denied, Reset and RetryAfter 6s", d)
	}
	// A cost of 3 waits for 3 tokens; t still says when the next one comes.
	if d, _ = b.Allow(ctx, edgelimit.Request{Key: "k", Cost: 3}); d.Allowed || d.Reset != 6*time.Second || d.RetryAfter != 30*time.Second {
		t.Errorf("Allow(cost 3) = %+v; want denied, Reset 6s, RetryAfter 30s", d)
	}
}

// TestDecisionAdvertisesTheBucket: Limit and Window are what the client is
// told (RateLimit-Policy q and w): the burst over the time the bucket takes
// to fill, as the engine computed it, so that Remaining never exceeds Limit.
func TestDecisionAdvertisesTheBucket(t *testing.T) {
	tests := []struct {
		limit, burst int64
		window       time.Duration
		wantQ        int64
		wantW        time.Duration
	}{
		{10, 20, time.Second, 20, 2 * time.Second},
		{60, 0, time.Minute, 60, time.Minute}, // burst defaults to the limit
		{60, 10, time.Minute, 10, 10 * time.Second},
		{3, 1, time.Second, 1, 333333333 * time.Nanosecond},
		{1, MaxTokens, 3650 * 24 * time.Hour, MaxTokens, time.Duration(1<<63 - 1)}, // saturates
	}
	for _, tc := range tests {
		name := fmt.Sprintf("%d per %s burst %d", tc.limit, tc.window, tc.burst)
		b := mustNew(t, Config{Policy: kvPolicy("adv", tc.limit, tc.burst, tc.window, 0), KV: NewMemory(MemoryConfig{})})
		for _, peek := range []bool{true, false} {
			var d edgelimit.Decision
			var err error
			if peek {
				d, err = b.PeekAt(ctx, t0, edgelimit.Request{Key: "k"})
			} else {
				d, err = b.AllowAt(ctx, t0, edgelimit.Request{Key: "k"})
			}
			if err != nil || d.Limit != tc.wantQ || d.Window != tc.wantW || d.Remaining > d.Limit {
				t.Errorf("%s: peek %v: %+v, %v; want Limit %d, Window %s", name, peek, d, err, tc.wantQ, tc.wantW)
			}
		}
	}
}

// TestRetryAfterIsNeverBeforeReset: whatever the instances, costs and
// clocks, every denial's RetryAfter is at least its Reset (the time until
// the cost fits is never shorter than the time until one token does), and
// Remaining never exceeds Limit, on every path: local, synced, contended,
// peeked.
func TestRetryAfterIsNeverBeforeReset(t *testing.T) {
	clk := newClock(t0)
	kv := NewMemory(MemoryConfig{Now: clk.Now})
	pol := kvPolicy("ra", 5, 10, 3*time.Second, 400*time.Millisecond)
	var instances []*Bucket
	for _, noCache := range []bool{false, false, true} {
		instances = append(instances, mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now, NoCache: noCache}))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		// Mostly forward, sometimes back (another instance's clock).
		step := time.Duration(rng.Int64N(int64(150*time.Millisecond))) - 10*time.Millisecond
		clk.Add(step)
		b := instances[rng.IntN(len(instances))]
		req := edgelimit.Request{Key: fmt.Sprint(rng.IntN(2)), Cost: rng.Int64N(12)}
		var d edgelimit.Decision
		var err error
		if rng.IntN(4) == 0 {
			d, err = b.Peek(ctx, req)
		} else {
			d, err = b.Allow(ctx, req)
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining > d.Limit || d.Reset <= 0 || !d.Allowed && d.RetryAfter < d.Reset {
			t.Fatalf("step %d: %+v: want Remaining <= Limit, Reset > 0, RetryAfter >= Reset", i, d)
		}
	}
}

// TestRefundGivesBackTheReceipt: Refund gives back exactly what the
// decision spent (its receipt's tokens, whatever req.Cost says), never
// beyond capacity, and nothing for a decision that spent nothing; a
// decision this Bucket did not spend for that key is refused.
func TestRefundGivesBackTheReceipt(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("nocache=%v", noCache), func(t *testing.T) {
			clk := newClock(t0)
			kv := &faultKV{KV: NewMemory(MemoryConfig{Now: clk.Now})}
			pol := kvPolicy("rf", 5, 5, time.Hour, time.Second)
			b := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now, NoCache: noCache})
			other := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now, NoCache: noCache})
			k := edgelimit.Request{Key: "k", Cost: 3}

			d, err := b.Allow(ctx, k)
			if err != nil || !d.Allowed || d.Remaining != 2 {
				t.Fatalf("Allow(3) = %+v, %v", d, err)
			}
			if d.Receipt.At != t0.UnixNano() || d.Receipt.Slot != 3 || d.Receipt.ID == ([16]byte{}) {
				t.Errorf("Receipt = %+v, want At t0, Slot 3 (the tokens), an ID", d.Receipt)
			}
			// Another bucket's, another key's and a peek's decisions are not
			// this one's to refund.
			od, _ := other.Allow(ctx, edgelimit.Request{Key: "k"}) // spends 1 of the 2 left
			kd, _ := b.Allow(ctx, edgelimit.Request{Key: "j"})
			pd, _ := b.Peek(ctx, edgelimit.Request{Key: "j"})
			for name, foreign := range map[string]edgelimit.Decision{"another bucket's": od, "another key's": kd, "a peek's": pd} {
				if !foreign.Allowed {
					t.Fatalf("%s decision = %+v, want allowed", name, foreign)
				}
				if err := b.Refund(ctx, k, foreign); !errors.Is(err, ErrReceipt) {
					t.Errorf("Refund(%s decision) = %v, want ErrReceipt", name, err)
				}
			}
			// A denial and a degraded decision spent nothing: no KV call.
			denied, _ := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: 5})
			degraded := d
			degraded.Degraded = true
			calls := kv.calls.Load()
			for _, nothing := range []edgelimit.Decision{denied, degraded} {
				if err := b.Refund(ctx, k, nothing); err != nil {
					t.Errorf("Refund(%+v) = %v, want nil", nothing, err)
				}
			}
			if kv.calls.Load() != calls {
				t.Error("refunding nothing called the KV")
			}
			// The receipt's 3 tokens come back, though req says 1: back to 5
			// less what other spent in the meantime (1), read at the next
			// sync.
			if err := b.Refund(ctx, edgelimit.Request{Key: "k", Cost: 1}, d); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Second)
			if got, _ := b.Peek(ctx, k); !got.Allowed || got.Remaining != 4 {
				t.Errorf("after the refund: Peek = %+v, want 4 left (5, less other's 1)", got)
			}
			// Never beyond capacity: a bucket full again gains nothing.
			clk.Add(time.Hour)
			if err := b.Refund(ctx, k, d); err != nil {
				t.Fatal(err)
			}
			if got, _ := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: 5}); !got.Allowed || got.Remaining != 0 {
				t.Errorf("Allow(5) after a refund into a full bucket = %+v, want allowed with 0 left", got)
			}
		})
	}
}

// TestRefundGivesBackOnlyWhatRefillHasNot pins the refund's decay rule:
// of the c tokens of a decision spent at s, a refund at r gives back
// c − (r − s)·Limit/Window, never less than nothing. Before, it gave back
// all c tokens at r, capped at full: the refund of an admission whose
// token had come back long ago, after the bucket was spent again, gave the
// new spending's token back (limitertest's Refund/ByReceipt, which kv runs
// now, caught it: a policy of 2 per 2s admitted a third request).
func TestRefundGivesBackOnlyWhatRefillHasNot(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("nocache=%v", noCache), func(t *testing.T) {
			clk := newClock(t0)
			b := mustNew(t, Config{Policy: kvPolicy("decay", 2, 2, 2*time.Second, time.Second), KV: NewMemory(MemoryConfig{Now: clk.Now}), Now: clk.Now, NoCache: noCache})
			allow := func(what string, cost int64, want bool, remaining int64) edgelimit.Decision {
				t.Helper()
				d, err := b.Allow(ctx, edgelimit.Request{Key: "k", Cost: cost})
				if err != nil || d.Allowed != want || d.Remaining != remaining {
					t.Errorf("%s: Allow(%d) at t0+%s = %+v, %v; want allowed %v, %d left", what, cost, clk.Now().Sub(t0), d, err, want, remaining)
				}
				return d
			}
			refund := func(d edgelimit.Decision) {
				t.Helper()
				if err := b.Refund(ctx, edgelimit.Request{Key: "k"}, d); err != nil {
					t.Fatal(err)
				}
			}
			// At once: all of it.
			refund(allow("first", 2, true, 0))
			a := allow("after an immediate refund", 1, true, 1)
			allow("the second token", 1, true, 0)
			// Half of a's token has come back by refill: the other half.
			clk.Add(500 * time.Millisecond)
			refund(a)
			clk.Add(500 * time.Millisecond) // 1.5 tokens now
			allow("half a token back", 2, false, 1)
			// A spend whose token came back long ago gives nothing back.
			clk.Add(10 * time.Second)
			old := allow("on a full bucket", 1, true, 1)
			clk.Add(10 * time.Second)
			allow("a new period", 2, true, 0)
			refund(old)
			allow("after refunding a spend of a full bucket long gone", 1, false, 0)
		})
	}
}

// TestRefundOfTheTwinIsTheTwins: a decision of the on_store_error: local
// twin is refunded to the twin, never to the shared bucket it did not spend.
func TestRefundOfTheTwinIsTheTwins(t *testing.T) {
	b := mustNew(t, Config{Policy: kvPolicy("twin", 2, 2, time.Hour, 0), KV: NewMemory(MemoryConfig{})})
	twin, err := b.Local()
	if err != nil {
		t.Fatal(err)
	}
	req := edgelimit.Request{Key: "k", At: t0}
	d, err := twin.Allow(ctx, req)
	if err != nil || !d.Allowed {
		t.Fatalf("twin.Allow = %+v, %v", d, err)
	}
	if err := b.Refund(ctx, req, d); !errors.Is(err, ErrReceipt) {
		t.Errorf("shared.Refund(twin's decision) = %v, want ErrReceipt", err)
	}
	if err := twin.(edgelimit.Refunder).Refund(ctx, req, d); err != nil {
		t.Errorf("twin.Refund(its decision) = %v", err)
	}
}

// TestPeekSpendsNothing: Peek answers as Allow would, from the same state,
// without spending, writing or caching: a key with a current local state
// with no KV call, any other with one read (strong for a key with no
// state here) and no write.
func TestPeekSpendsNothing(t *testing.T) {
	clk := newClock(t0)
	kv := &faultKV{KV: NewMemory(MemoryConfig{Now: clk.Now})}
	pol := kvPolicy("pk", 3, 3, time.Hour, time.Second)
	b := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
	a := mustNew(t, Config{Policy: pol, KV: kv, Now: clk.Now})
	req := edgelimit.Request{Key: "k"}
	type calls struct{ gets, updates int64 }
	peek := func(what string, l *Bucket, r edgelimit.Request, allowed bool, remaining int64, want calls) edgelimit.Decision {
		t.Helper()
		g, p := kv.gets.Load(), kv.updates.Load()
		d, err := l.Peek(ctx, r)
		if err != nil {
			t.Fatalf("%s: Peek: %v", what, err)
		}
		if got := (calls{kv.gets.Load() - g, kv.updates.Load() - p}); d.Allowed != allowed || d.Remaining != remaining || got != want {
			t.Errorf("%s: Peek = %+v with %+v calls; want allowed %v, %d left, %+v calls", what, d, got, allowed, remaining, want)
		}
		if d.Receipt != (edgelimit.Receipt{}) {
			t.Errorf("%s: Peek carries a receipt %+v: it spent nothing", what, d.Receipt)
		}
		return d
	}
	peek("unknown key", b, req, true, 3, calls{1, 0})
	if st := b.Stats(); st.Keys != 0 {
		t.Errorf("a peek cached the key: %+v", st)
	}
	for range 3 {
		if d, _ := b.Allow(ctx, req); !d.Allowed {
			t.Fatalf("Allow = %+v", d)
		}
	}
	denied := peek("empty, fresh", b, req, false, 0, calls{})
	if d, _ := b.Allow(ctx, req); d.Allowed || d.RetryAfter != denied.RetryAfter || d.Reset != denied.Reset {
		t.Errorf("Allow after Peek denied = %+v, want the same denial %+v", d, denied)
	}
	// Another instance reads what b wrote (its first sync interval writes
	// every admission through): nothing left.
	peek("another instance, cost above what is left", a, edgelimit.Request{Key: "k", Cost: 3}, false, 0, calls{1, 0})
	clk.Add(time.Hour)
	peek("refilled, due", b, req, true, 3, calls{1, 0})
	peek("again: a peek does not sync", b, req, true, 3, calls{1, 0})
	before, _ := kv.KV.get(ctx, "pk#k", wire.Strong)
	if d, _ := b.Allow(ctx, req); !d.Allowed || d.Remaining != 2 {
		t.Errorf("Allow after the peeks = %+v, want 2 left: the peeks spent nothing", d)
	}
	if after, _ := kv.KV.get(ctx, "pk#k", wire.Strong); after.Own.TAT == before.Own.TAT {
		t.Error("the Allow after the peeks did not write")
	}
}

// TestRequestAtIsTheInstant: a Bucket without its own clock decides at
// Request.At (Allow, Refund and Peek alike); one built with Config.Now keeps
// its clock and ignores Request.At.
func TestRequestAtIsTheInstant(t *testing.T) {
	pol := kvPolicy("at", 2, 2, time.Minute, 0)
	kvClock := newClock(t0)
	free := mustNew(t, Config{Policy: pol, KV: NewMemory(MemoryConfig{Now: kvClock.Now})})
	steps := []struct {
		at      time.Duration
		allowed bool
	}{
		{0, true}, {0, true}, {0, false},
		{30 * time.Second, true}, // a token back after 30s of Request.At
		{30 * time.Second, false},
		{time.Hour, true},
	}
	for i, st := range steps {
		kvClock.Set(t0.Add(st.at))
		req := edgelimit.Request{Key: "k", At: t0.Add(st.at)}
		p, err := free.Peek(ctx, req)
		if err != nil || p.Allowed != st.allowed {
			t.Errorf("step %d: Peek at t0+%s = %+v, %v; want allowed %v", i, st.at, p, err, st.allowed)
		}
		d, err := free.Allow(ctx, req)
		if err != nil || d.Allowed != st.allowed {
			t.Errorf("step %d: Allow at t0+%s = %+v, %v; want allowed %v", i, st.at, d, err, st.allowed)
		}
		if d.Allowed && d.Receipt.At != req.At.UnixNano() {
			t.Errorf("step %d: Receipt.At = %d, want Request.At %d", i, d.Receipt.At, req.At.UnixNano())
		}
	}

	clk := newClock(t0)
	own := mustNew(t, Config{Policy: pol, KV: NewMemory(MemoryConfig{Now: clk.Now}), Now: clk.Now})
	for i := range 3 {
		d, err := own.Allow(ctx, edgelimit.Request{Key: "k", At: t0.Add(time.Duration(i) * time.Hour)})
		if err != nil || d.Allowed != (i < 2) || d.Receipt.At != 0 && d.Receipt.At != t0.UnixNano() {
			t.Errorf("own clock: Allow #%d = %+v, %v; want its clock (t0), not Request.At", i, d, err)
		}
	}
}

// TestDynamoDBPeekNeverWrites counts the SDK's calls of a peek on the real
// servers: one GetItem for a key that is not fresh, none for a fresh one,
// never a PutItem.
func TestDynamoDBPeekNeverWrites(t *testing.T) {
	ddbtest.ForEach(t, func(t *testing.T, srv ddbtest.Server) {
		clk := newClock(t0)
		kv, tab := dynamoKV(t, srv, clk.Now)
		counter := tab.Counter
		b := mustNew(t, Config{Policy: kvPolicy("peek", 2, 2, time.Hour, time.Second), KV: kv, Now: clk.Now})
		req := edgelimit.Request{Key: "k"}
		check := func(what string, wantAllowed bool, wantGets int) {
			t.Helper()
			counter.Reset()
			d, err := b.Peek(ctx, req)
			if err != nil || d.Allowed != wantAllowed || counter.Op("GetItem") != wantGets || counter.Op("UpdateItem") != 0 {
				t.Errorf("%s: Peek = %+v, %v with %d GetItem, %d UpdateItem; want allowed %v, %d, 0",
					what, d, err, counter.Op("GetItem"), counter.Op("UpdateItem"), wantAllowed, wantGets)
			}
		}
		check("new key", true, 1)
		for range 2 {
			if _, err := b.Allow(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		check("first interval, empty", false, 0)
		clk.Add(time.Second)
		check("due, empty", false, 1)
	})
}
