package limitertest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// Workers is the number of goroutines of the concurrency tests.
const Workers = 64

// hammer runs fn(i) for i in [0, n) on Workers goroutines and returns the
// first error.
func hammer(n int, fn func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range Workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// testConcurrentOneKey: 64 goroutines send 4,000 requests at one key with a
// limit of 1,000; exactly 1,000 are admitted.
func (s *suite) testConcurrentOneKey(t *testing.T) {
	e := s.env(t)
	const limit, requests = 1000, 4000
	l := e.limiter("hot", limit, time.Hour)
	var admitted, denied atomic.Int64
	err := hammer(requests, func(i int) error {
		d, err := l.l.Allow(e.ctx(), edgelimit.Request{Key: "hot", Cost: 1})
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if msg := checkDecision(l.p, 1, d); msg != "" {
			return fmt.Errorf("request %d: %+v: %s", i, d, msg)
		}
		if d.Allowed {
			admitted.Add(1)
		} else {
			denied.Add(1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if admitted.Load() != limit || denied.Load() != requests-limit {
		t.Errorf("%d goroutines, %d requests, limit %d: admitted %d, denied %d; want exactly %d admitted",
			Workers, requests, limit, admitted.Load(), denied.Load(), limit)
	}
}

// testConcurrentNoSpuriousDenials proves that no request that fits is
// denied, deterministically: 64 goroutines send exactly limit requests and
// every one must be admitted; then every further request must be denied.
func (s *suite) testConcurrentNoSpuriousDenials(t *testing.T) {
	e := s.env(t)
	const limit, extra = 1000, 4 * Workers
	l := e.limiter("phases", limit, time.Hour)
	phase := func(name string, n int, wantAllowed bool) {
		t.Helper()
		var wrong atomic.Int64
		err := hammer(n, func(i int) error {
			d, err := l.l.Allow(e.ctx(), edgelimit.Request{Key: "hot", Cost: 1})
			if err != nil {
				return fmt.Errorf("%s, request %d: %w", name, i, err)
			}
			if msg := checkDecision(l.p, 1, d); msg != "" {
				return fmt.Errorf("%s, request %d: %+v: %s", name, i, d, msg)
			}
			if d.Allowed != wantAllowed {
				wrong.Add(1)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if w := wrong.Load(); w != 0 {
			t.Errorf("%s: %d of %d requests were not %s", name, w, n, map[bool]string{true: "admitted (spurious denials)", false: "denied (over-admission)"}[wantAllowed])
		}
	}
	phase("phase 1: exactly limit requests", limit, true)
	phase("phase 2: past the limit", extra, false)
}

// testConcurrentDistinctKeys: 1,000 keys with a limit of 2 get 3 requests
// each, interleaved over 64 goroutines; every key gets exactly 2.
func (s *suite) testConcurrentDistinctKeys(t *testing.T) {
	e := s.env(t)
	const keys, limit, perKey = 1000, 2, 3
	l := e.limiter("many", limit, time.Hour)
	var admitted [keys]atomic.Int64
	err := hammer(keys*perKey, func(i int) error {
		k := i % keys
		d, err := l.l.Allow(e.ctx(), edgelimit.Request{Key: fmt.Sprintf("key-%04d", k), Cost: 1})
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if msg := checkDecision(l.p, 1, d); msg != "" {
			return fmt.Errorf("request %d: %+v: %s", i, d, msg)
		}
		if d.Allowed {
			admitted[k].Add(1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for k := range admitted {
		if n := admitted[k].Load(); n != limit {
			if bad < 10 {
				t.Errorf("key-%04d: admitted %d, want %d", k, n, limit)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d keys did not get exactly their limit", bad, keys)
	}
}

// testConcurrentBatch: 64 goroutines send 300 batches {a: limit 200, b:
// limit 100}; exactly 100 are admitted and a is left with 100 spent,
// whatever the interleaving: denied batches spend nothing.
func (s *suite) testConcurrentBatch(t *testing.T) {
	e := s.env(t)
	a := e.limiter("cbatch-a", 200, time.Hour)
	b := e.limiter("cbatch-b", 100, time.Hour)
	ba, bb := a.l.(edgelimit.BatchLimiter), b.l.(edgelimit.BatchLimiter)
	var admitted atomic.Int64
	err := hammer(300, func(i int) error {
		items := []edgelimit.BatchItem{
			{Limiter: ba, Request: edgelimit.Request{Key: "k", Cost: 1}},
			{Limiter: bb, Request: edgelimit.Request{Key: "k", Cost: 1}},
		}
		ds, err := ba.AllowBatch(e.ctx(), items)
		if err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		if len(ds) != 2 {
			return fmt.Errorf("batch %d: %d decisions", i, len(ds))
		}
		if ds[0].Allowed && ds[1].Allowed {
			admitted.Add(1)
		} else if ds[1].Allowed {
			return fmt.Errorf("batch %d: denied by %+v although a has room", i, ds[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := admitted.Load(); n != 100 {
		t.Errorf("admitted %d batches, want exactly 100 (b's limit)", n)
	}
	if d := a.allow("k", 1); !d.Allowed || d.Remaining != 99 {
		t.Errorf("cbatch-a.Allow after the batches = %+v, want allowed with Remaining 99 (100 spent by admitted batches, none by denied ones)", d)
	}
	if d := b.allow("k", 1); d.Allowed {
		t.Errorf("cbatch-b.Allow after the batches = %+v, want denied", d)
	}
}
