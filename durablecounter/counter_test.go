package durablecounter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
)

func TestNewValidates(t *testing.T) {
	ok := func() *policy.Policy {
		return &policy.Policy{Name: "p", Limit: 5, Window: time.Minute, Options: &durablecounter.Options{Algorithm: durablecounter.FixedWindow, Shards: 1}}
	}
	for _, tc := range []struct {
		name string
		pol  func() *policy.Policy
		want error
	}{
		{"no policy", func() *policy.Policy { return nil }, durablecounter.ErrConfig},
		{"no name", func() *policy.Policy { p := ok(); p.Name = ""; return p }, durablecounter.ErrConfig},
		{"# in name", func() *policy.Policy { p := ok(); p.Name = "a#b"; return p }, durablecounter.ErrConfig},
		{"kv strategy", func() *policy.Policy { p := ok(); p.Strategy = &policy.Strategy{Name: "kv"}; return p }, durablecounter.ErrConfig},
		{"negative limit", func() *policy.Policy { p := ok(); p.Limit = -1; return p }, durablecounter.ErrConfig},
		{"no window", func() *policy.Policy { p := ok(); p.Window = 0; return p }, durablecounter.ErrConfig},
		{"sub-millisecond window", func() *policy.Policy { p := ok(); p.Window = 1500 * time.Microsecond; return p }, durablecounter.ErrConfig},
		{"more shards than units", func() *policy.Policy { p := ok(); opts(p).Shards = 6; return p }, durablecounter.ErrConfig},
		{"too many shards", func() *policy.Policy { p := ok(); p.Limit = 5000; opts(p).Shards = 1001; return p }, durablecounter.ErrConfig},
		{"shards", func() *policy.Policy { p := ok(); opts(p).Shards = 5; return p }, nil},
		{"gcra", func() *policy.Policy { p := ok(); opts(p).Algorithm = durablecounter.GCRA; return p }, nil},
		{"gcra burst", func() *policy.Policy {
			p := ok()
			opts(p).Algorithm = durablecounter.GCRA
			opts(p).Burst = 20
			return p
		}, nil},
		{"gcra burst below shards", func() *policy.Policy {
			p := ok()
			opts(p).Algorithm, opts(p).Burst, opts(p).Shards = durablecounter.GCRA, 2, 3
			return p
		}, durablecounter.ErrConfig},
		{"gcra tolerance overflow", func() *policy.Policy {
			p := ok()
			opts(p).Algorithm, p.Limit, p.Window, opts(p).Burst = durablecounter.GCRA, 1, 3650*24*time.Hour, 1<<40
			return p
		}, durablecounter.ErrConfig},
		{"sliding window", func() *policy.Policy { p := ok(); opts(p).Algorithm = durablecounter.SlidingWindow; return p }, nil},
		{"sliding log", func() *policy.Policy { p := ok(); opts(p).Algorithm = durablecounter.SlidingLog; return p }, nil},
		{"sliding log at its largest limit", func() *policy.Policy {
			p := ok()
			opts(p).Algorithm, p.Limit = durablecounter.SlidingLog, durablecounter.MaxSlidingLogLimit
			return p
		}, nil},
		{"sliding log above its largest limit", func() *policy.Policy {
			p := ok()
			opts(p).Algorithm, p.Limit = durablecounter.SlidingLog, durablecounter.MaxSlidingLogLimit+1
			return p
		}, durablecounter.ErrConfig},
		{"sliding log above its largest limit, sharded", func() *policy.Policy {
			p := ok()
			opts(p).Algorithm, p.Limit, opts(p).Shards = durablecounter.SlidingLog, 2*durablecounter.MaxSlidingLogLimit, 2
			return p
		}, nil},
		{"unknown algorithm", func() *policy.Policy { p := ok(); opts(p).Algorithm = "leaky"; return p }, durablecounter.ErrUnsupportedAlgorithm},
		{"valid", ok, nil},
		{"defaults", func() *policy.Policy { return &policy.Policy{Name: "p", Limit: 0, Window: time.Millisecond} }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := durablecounter.New(durablecounter.Config{Policy: tc.pol()})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (c != nil) {
				t.Errorf("New = %v, %v; want error %v", c, err, tc.want)
			}
		})
	}
}

func TestEmptyKey(t *testing.T) {
	c := newCounter(t, durablecounter.NewMemory(durablecounter.MemoryConfig{}), "p", 5, time.Minute)
	if _, err := c.Allow(context.Background(), edgelimit.Request{}); !errors.Is(err, durablecounter.ErrNoKey) {
		t.Errorf("Allow(no key) = %v, want ErrNoKey", err)
	}
	if err := c.Refund(context.Background(), edgelimit.Request{}, edgelimit.Decision{}); !errors.Is(err, durablecounter.ErrNoKey) {
		t.Errorf("Refund(no key) = %v, want ErrNoKey", err)
	}
	if _, err := c.Peek(context.Background(), edgelimit.Request{}); !errors.Is(err, durablecounter.ErrNoKey) {
		t.Errorf("Peek(no key) = %v, want ErrNoKey", err)
	}
}

// TestRequestAt: a Counter without a clock of its own decides at the
// request's At (the engine reads the instant once for every policy of a
// request); one with Config.Now uses its clock, whatever At says.
func TestRequestAt(t *testing.T) {
	store := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	p := &policy.Policy{Name: "at", Limit: 1, Window: time.Minute}
	free, err := durablecounter.New(durablecounter.Config{Policy: p, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	ws := time.Unix(1_700_000_000, 0).Truncate(time.Minute)
	ctx := context.Background()
	for i, tc := range []struct {
		at      time.Time
		allowed bool
		reset   time.Duration
	}{
		{ws.Add(10 * time.Second), true, 50 * time.Second},
		{ws.Add(20 * time.Second), false, 40 * time.Second},
		{ws.Add(time.Minute), true, time.Minute}, // the next window
	} {
		d, err := free.Allow(ctx, edgelimit.Request{Key: "k", At: tc.at})
		if err != nil || d.Allowed != tc.allowed || d.Reset != tc.reset || (d.Allowed && d.Receipt.At != tc.at.UnixNano()) {
			t.Errorf("request %d at ws+%s: %+v, %v; want allowed %v, Reset %s, decided at its At", i, tc.at.Sub(ws), d, err, tc.allowed, tc.reset)
		}
	}
	own, err := durablecounter.New(durablecounter.Config{Policy: &policy.Policy{Name: "own", Limit: 1, Window: time.Minute}, Store: store,
		Now: func() time.Time { return ws.Add(30 * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := own.Allow(ctx, edgelimit.Request{Key: "k", At: ws.Add(5 * time.Minute)}); err != nil || d.Reset != 30*time.Second {
		t.Errorf("Counter with its own clock: %+v, %v; want Reset 30s (its clock, not At)", d, err)
	}
}

func TestBatchMisuse(t *testing.T) {
	s1 := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	s2 := durablecounter.NewMemory(durablecounter.MemoryConfig{})
	a, b, other := newCounter(t, s1, "a", 5, time.Minute), newCounter(t, s1, "b", 5, time.Minute), newCounter(t, s2, "c", 5, time.Minute)
	if a.BatchKey() != b.BatchKey() || a.BatchKey() == other.BatchKey() || a.BatchKey() == "" {
		t.Errorf("BatchKeys %q, %q, %q: want equal for one store, different for another", a.BatchKey(), b.BatchKey(), other.BatchKey())
	}
	req := edgelimit.Request{Key: "k"}
	for name, tc := range map[string]struct {
		items []edgelimit.BatchItem
		want  error
	}{
		"another store": {[]edgelimit.BatchItem{{Limiter: a, Request: req}, {Limiter: other, Request: req}}, durablecounter.ErrBatch},
		"policy twice":  {[]edgelimit.BatchItem{{Limiter: a, Request: req}, {Limiter: a, Request: req}}, durablecounter.ErrBatch},
		"not a Counter": {[]edgelimit.BatchItem{{Limiter: a, Request: req}, {Limiter: fakeBatcher{}, Request: req}}, durablecounter.ErrBatch},
		"no key":        {[]edgelimit.BatchItem{{Limiter: a, Request: req}, {Limiter: b}}, durablecounter.ErrNoKey},
	} {
		if ds, err := a.AllowBatch(context.Background(), tc.items); !errors.Is(err, tc.want) {
			t.Errorf("%s: AllowBatch = %+v, %v; want %v", name, ds, err, tc.want)
		}
	}
	if ds, err := a.AllowBatch(context.Background(), nil); ds != nil || err != nil {
		t.Errorf("AllowBatch(nil) = %v, %v; want nil, nil", ds, err)
	}
	// Nothing above spent anything.
	if d, _ := a.Allow(context.Background(), req); d.Remaining != 4 {
		t.Errorf("a.Allow after refused batches: Remaining %d, want 4", d.Remaining)
	}
}

type fakeBatcher struct{ limitertest.LimiterFunc }

func (fakeBatcher) BatchKey() string { return "x" }

func (fakeBatcher) AllowBatch(context.Context, []edgelimit.BatchItem) ([]edgelimit.Decision, error) {
	return nil, nil
}

// opts returns a test policy's durable options, to change them.
func opts(p *policy.Policy) *durablecounter.Options {
	if p.Options == nil {
		p.Options = &durablecounter.Options{}
	}
	return p.Options.(*durablecounter.Options)
}

// t0 is a fixed instant; its 1h window starts at 1699999200 and ends at 1700002800.
var t0 = time.Unix(1_700_000_000, 0)

func newCounter(t *testing.T, store durablecounter.Store, name string, limit int64, window time.Duration) *durablecounter.Counter {
	t.Helper()
	c, err := durablecounter.New(durablecounter.Config{
		Policy: &policy.Policy{Name: name, Limit: limit, Window: window},
		Store:  store,
		Now:    func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
