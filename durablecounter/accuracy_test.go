package durablecounter_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

// A trace is a synthetic workload of Poisson arrivals from many clients.
// A bursty client alternates between quiet spells (arrivals at half its
// limit's rate) and bursts (four times it), of exponentially distributed
// lengths (90 s and 20 s on average), so its rate crosses its limit often:
// the regime where an approximate window errs. A calm client sends at a
// fifth of the rate all along, as most clients of a web API do.
type arrival struct {
	at     time.Duration
	client int32
}

func bursty(clients int, span time.Duration, limit int64, window time.Duration, seed uint64, burstyShare float64) []arrival {
	rng := rand.New(rand.NewPCG(seed, 1))
	rate := float64(limit) / window.Seconds() // requests a second at the limit
	exp := func(mean float64) float64 { return -math.Log(1-rng.Float64()) * mean }
	var out []arrival
	for c := range clients {
		calm := rng.Float64() >= burstyShare
		t, burst := 0.0, !calm && rng.IntN(5) == 0
		for t < span.Seconds() {
			spell, r := exp(90), rate/2
			switch {
			case calm:
				spell, r = span.Seconds(), rate/5
			case burst:
				spell, r = exp(20), 4*rate
			}
			end := min(t+spell, span.Seconds())
			for t += exp(1 / r); t < end; t += exp(1 / r) {
				out = append(out, arrival{at: time.Duration(t * float64(time.Second)), client: int32(c)})
			}
			t, burst = end, !burst
		}
	}
	slices.SortStableFunc(out, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
	return out
}

// accuracy is how an algorithm's decisions compare with the exact rolling
// window's on the same history: for every request, the exact rule (units
// admitted in the last window, at millisecond resolution, plus this one,
// at most the limit) is applied to what the algorithm itself admitted so
// far. wrongAllowed counts requests it admitted that the exact window
// would have denied, wrongDenied the reverse.
// peak is the most units the algorithm admitted in any rolling window,
// relative to the limit.
type accuracy struct {
	requests, admitted, wrongAllowed, wrongDenied int
	peak                                          float64
}

func (a accuracy) String() string {
	pct := func(n int) float64 { return 100 * float64(n) / float64(a.requests) }
	return fmt.Sprintf("%d requests, %.2f%% admitted, %.4f%% wrongly allowed, %.4f%% wrongly denied, %.4f%% wrong, rolling-window peak %.2fx the limit",
		a.requests, pct(a.admitted), pct(a.wrongAllowed), pct(a.wrongDenied), pct(a.wrongAllowed+a.wrongDenied), a.peak)
}

func measureAccuracy(tb testing.TB, alg string, trace []arrival, clients int, limit int64, window time.Duration) accuracy {
	tb.Helper()
	clock := limitertest.NewClock(limitertest.T0)
	c, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "acc", Limit: limit, Window: window, Options: &durablecounter.Options{Algorithm: durablecounter.Algorithm(alg)}},
		Store:  durablecounter.NewMemory(durablecounter.MemoryConfig{}),
		Now:    clock.Now,
	})
	if err != nil {
		tb.Fatal(err)
	}
	keys := make([]string, clients)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%d", i)
	}
	// The exact window over what c admitted: each client's admissions in
	// the last window, in milliseconds.
	logs := make([][]int64, clients)
	wms := window.Milliseconds()
	var acc accuracy
	ctx := context.Background()
	for _, a := range trace {
		now := limitertest.T0.Add(a.at)
		clock.Set(now)
		tm := now.UnixMilli()
		l := logs[a.client]
		k := 0
		for k < len(l) && l[k] <= tm-wms {
			k++
		}
		l = l[k:]
		exact := int64(len(l))+1 <= limit
		d, err := c.Allow(ctx, edgelimit.Request{Key: keys[a.client]})
		if err != nil {
			tb.Fatal(err)
		}
		acc.requests++
		switch {
		case d.Allowed && !exact:
			acc.wrongAllowed++
		case !d.Allowed && exact:
			acc.wrongDenied++
		}
		if d.Allowed {
			acc.admitted++
			l = append(l, tm)
			acc.peak = max(acc.peak, float64(len(l))/float64(limit))
		}
		logs[a.client] = l
	}
	return acc
}

// TestAccuracy runs small traces (200 clients, 10 minutes, a limit of 100
// a minute): the sliding log is the exact window (no wrong decision at
// all, whatever the traffic); the sliding window errs only on requests of
// clients that run at their limit, so its share of wrong decisions follows
// the share of such traffic. The figures for docs/durable.md come from
// BenchmarkAccuracy's larger traces.
func TestAccuracy(t *testing.T) {
	t.Parallel()
	const clients, limit, window = 200, 100, time.Minute
	for _, tr := range []struct {
		name  string
		share float64
	}{{"every client bursty", 1}, {"2% of clients bursty", 0.02}, {"0.1% of clients bursty", 0.001}} {
		trace := bursty(clients, 10*time.Minute, limit, window, 1, tr.share)
		for _, alg := range []string{string(durablecounter.SlidingLog), string(durablecounter.SlidingWindow)} {
			acc := measureAccuracy(t, alg, trace, clients, limit, window)
			t.Logf("%s, %-14s %s", tr.name, alg, acc)
			if alg == string(durablecounter.SlidingLog) && acc.wrongAllowed+acc.wrongDenied != 0 {
				t.Errorf("sliding-log differs from the exact window: %s", acc)
			}
			if alg == string(durablecounter.SlidingWindow) && acc.peak > 2 {
				t.Errorf("sliding-window admitted more than twice the limit in a rolling window: %s", acc)
			}
		}
	}
}

// BenchmarkAccuracy reports, for traces of 1,000 clients over an hour with
// a limit of 100 a minute, the share of requests each algorithm decides
// differently from the exact rolling window: wrongly allowed and wrongly
// denied, in percent. "bursty": every client alternates between calm
// spells and bursts at 4x its limit (about 7 million requests);
// "calm-2pct" and "calm-0.1pct": 2% and 0.1% of clients do, the rest send
// at a fifth of their limit. It measures
// decisions, not speed. (gcra with burst = limit admits a full bucket on
// top of the refill by design: its "wrongly allowed" is the price of the
// burst, not an error.)
//
//	go test -run '^$' -bench BenchmarkAccuracy -benchtime 1x ./durablecounter/
func BenchmarkAccuracy(b *testing.B) {
	const clients, limit, window = 1000, 100, time.Minute
	for _, tr := range []struct {
		name  string
		share float64
	}{{"bursty", 1}, {"calm-2pct", 0.02}, {"calm-0.1pct", 0.001}} {
		trace := bursty(clients, time.Hour, limit, window, 1, tr.share)
		for _, alg := range []string{string(durablecounter.SlidingWindow), string(durablecounter.SlidingLog), string(durablecounter.FixedWindow), string(durablecounter.GCRA)} {
			b.Run(tr.name+"/"+alg, func(b *testing.B) {
				var acc accuracy
				for b.Loop() {
					acc = measureAccuracy(b, alg, trace, clients, limit, window)
				}
				pct := func(n int) float64 { return 100 * float64(n) / float64(acc.requests) }
				b.ReportMetric(float64(acc.requests), "requests")
				b.ReportMetric(pct(acc.admitted), "%admitted")
				b.ReportMetric(pct(acc.wrongAllowed), "%wrongly-allowed")
				b.ReportMetric(pct(acc.wrongDenied), "%wrongly-denied")
				b.ReportMetric(acc.peak, "peak/limit")
				b.Logf("%s, %s: %s", tr.name, alg, acc)
			})
		}
	}
}
