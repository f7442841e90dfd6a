package durablecounter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/policy"
)

func ExampleNew() {
	// One store per process; on Lambda use dynamostore.New so that every
	// instance shares the counts.
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	counter, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "paid-daily", Limit: 1000, Window: 24 * time.Hour, Options: &durablecounter.Options{Algorithm: durablecounter.FixedWindow}},
		Store:  store,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%T\n", counter)

	_, err = durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "burst", Limit: 10, Window: 0, Options: &durablecounter.Options{Algorithm: durablecounter.FixedWindow}},
	})
	fmt.Println(err)
	// Output:
	// *durablecounter.Counter
	// durablecounter: invalid config: policy "burst": window 0s must be a whole number of milliseconds, at least 1ms
}

func ExampleCounter_Allow() {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	counter, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "login", Limit: 3, Window: time.Minute},
		Store:  durablecounter.NewMemory(durablecounter.MemoryConfig{}),
		Now:    func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Keys arrive hashed (keyhash.Hasher); any stable string works.
	req := edgelimit.Request{Key: "client-1"}
	for i := range 5 {
		now = t0.Add(time.Duration(i) * 10 * time.Second)
		d, err := counter.Allow(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s allowed=%v remaining=%d reset=%s retry-after=%s\n",
			now.Format("15:04:05"), d.Allowed, d.Remaining, d.Reset, d.RetryAfter)
	}
	now = t0.Add(time.Minute) // a new window
	d, _ := counter.Allow(context.Background(), req)
	fmt.Printf("%s allowed=%v remaining=%d\n", now.Format("15:04:05"), d.Allowed, d.Remaining)
	// Output:
	// 12:00:00 allowed=true remaining=2 reset=1m0s retry-after=0s
	// 12:00:10 allowed=true remaining=1 reset=50s retry-after=0s
	// 12:00:20 allowed=true remaining=0 reset=40s retry-after=0s
	// 12:00:30 allowed=false remaining=0 reset=30s retry-after=30s
	// 12:00:40 allowed=false remaining=0 reset=20s retry-after=20s
	// 12:01:00 allowed=true remaining=2
}

func ExampleCounter_AllowBatch() {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	newCounter := func(name string, limit int64, window time.Duration) *durablecounter.Counter {
		c, err := durablecounter.New(durablecounter.Config{
			Policy: &policy.Policy{Name: name, Limit: limit, Window: window},
			Store:  store,
			Now:    func() time.Time { return now },
		})
		if err != nil {
			panic(err)
		}
		return c
	}
	daily, burst := newCounter("daily", 1000, 24*time.Hour), newCounter("burst", 2, time.Second)
	items := []edgelimit.BatchItem{
		{Limiter: daily, Request: edgelimit.Request{Key: "api-key-1"}},
		{Limiter: burst, Request: edgelimit.Request{Key: "api-key-1"}},
	}
	// The third request is denied by burst and spends nothing of daily.
	for range 3 {
		ds, err := daily.AllowBatch(context.Background(), items)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("daily: %v %d, burst: %v %d\n", ds[0].Allowed, ds[0].Remaining, ds[1].Allowed, ds[1].Remaining)
	}
	// Output:
	// daily: true 999, burst: true 1
	// daily: true 998, burst: true 0
	// daily: true 998, burst: false 0
}

// A sliding window weighs the previous window's count by how much of it is
// still inside the last window: a client that spent its limit at the end
// of one minute gets nothing at the start of the next, and regains it
// gradually (the fixed window's 2x boundary burst cannot happen).
func ExampleNew_slidingWindow() {
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	now := start
	counter, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "search", Limit: 10, Window: time.Minute, Options: &durablecounter.Options{Algorithm: durablecounter.SlidingWindow}},
		Store:  durablecounter.NewMemory(durablecounter.MemoryConfig{}),
		Now:    func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := edgelimit.Request{Key: "client-1"}
	now = start.Add(50 * time.Second)
	d, _ := counter.Allow(context.Background(), edgelimit.Request{Key: "client-1", Cost: 10})
	fmt.Printf("12:00:50 cost 10: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	for _, at := range []time.Duration{60, 65, 66, 90} {
		now = start.Add(at * time.Second)
		d, _ := counter.Allow(context.Background(), req)
		fmt.Printf("%s allowed=%v remaining=%d retry-after=%s\n", now.Format("15:04:05"), d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// 12:00:50 cost 10: allowed=true remaining=0
	// 12:01:00 allowed=false remaining=0 retry-after=6s
	// 12:01:05 allowed=false remaining=0 retry-after=1s
	// 12:01:06 allowed=true remaining=0 retry-after=0s
	// 12:01:30 allowed=true remaining=3 retry-after=0s
}

// gcra is nginx's limit_req with nodelay: from idle, burst requests pass
// at once, then one per interval (window / limit). (nginx's burst=b passes
// b+1 at once: burst B here is nginx's burst=B-1.) Reset is until the next
// unit comes back: one interval here.
func ExampleNew_gcra() {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	counter, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "paid-burst", Limit: 10, Window: time.Second, Options: &durablecounter.Options{Algorithm: durablecounter.GCRA, Burst: 3}},
		Store:  durablecounter.NewMemory(durablecounter.MemoryConfig{}),
		Now:    func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 4 {
		d, _ := counter.Allow(context.Background(), edgelimit.Request{Key: "api-key-1"})
		fmt.Printf("allowed=%v remaining=%d reset=%s retry-after=%s\n", d.Allowed, d.Remaining, d.Reset, d.RetryAfter)
	}
	now = now.Add(100 * time.Millisecond) // one interval: one more
	d, _ := counter.Allow(context.Background(), edgelimit.Request{Key: "api-key-1"})
	fmt.Printf("100ms later: allowed=%v\n", d.Allowed)
	// Output:
	// allowed=true remaining=2 reset=100ms retry-after=0s
	// allowed=true remaining=1 reset=100ms retry-after=0s
	// allowed=true remaining=0 reset=100ms retry-after=0s
	// allowed=false remaining=0 reset=100ms retry-after=100ms
	// 100ms later: allowed=true
}

// A sliding log counts exactly the units of the last window, each leaving
// it a window after it was admitted.
func ExampleNew_slidingLog() {
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	now := start
	counter, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: "login", Limit: 3, Window: time.Minute, Options: &durablecounter.Options{Algorithm: durablecounter.SlidingLog}},
		Store:  durablecounter.NewMemory(durablecounter.MemoryConfig{}),
		Now:    func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, at := range []time.Duration{0, 20, 40, 50, 60, 61} {
		now = start.Add(at * time.Second)
		d, _ := counter.Allow(context.Background(), edgelimit.Request{Key: "user-1"})
		fmt.Printf("%s allowed=%v remaining=%d retry-after=%s\n", now.Format("15:04:05"), d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// 12:00:00 allowed=true remaining=2 retry-after=0s
	// 12:00:20 allowed=true remaining=1 retry-after=0s
	// 12:00:40 allowed=true remaining=0 retry-after=0s
	// 12:00:50 allowed=false remaining=0 retry-after=10s
	// 12:01:00 allowed=true remaining=0 retry-after=0s
	// 12:01:01 allowed=false remaining=0 retry-after=19s
}
