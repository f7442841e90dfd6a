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

// testConcurrentOneKey: 64 goroutines send 4,000 requests for one key with
// a limit of 1,000: exactly 1,000 are admitted, and no request is denied
// while quota is left. Phase 1 sends limit-64 requests, which must all be
// admitted (no spurious denial, deterministically, under full concurrency);
// phase 2 sends the other 3,064 free-running across the moment the quota
// runs out: exactly 64 more are admitted, and no denial completed before an
// admitted request was sent (that denial would have met a quota with room:
// a spurious denial). (Serialized: 1,000 requests, a limit of 250.)
func (s *suite) testConcurrentOneKey(t *testing.T) {
	e := s.env(t)
	limit, requests := 1000, 4000
	if s.opts.Serialized {
		limit, requests = 250, 1000
	}
	l := e.limiter("hot", int64(limit), time.Hour)
	ask := func(i int) (bool, error) {
		d, err := l.l.Allow(e.ctx(), edgelimit.Request{Key: "hot", Cost: 1})
		if err != nil {
			return false, fmt.Errorf("request %d: %w", i, err)
		}
		if msg := checkDecision(l.p, 1, d); msg != "" {
			return false, fmt.Errorf("request %d: %+v: %s", i, d, msg)
		}
		return d.Allowed, nil
	}
	var denied1 atomic.Int64
	err := hammer(limit-Workers, func(i int) error {
		ok, err := ask(i)
		if err == nil && !ok {
			denied1.Add(1)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := denied1.Load(); n != 0 {
		t.Errorf("phase 1: %d of %d requests within the limit were denied (spurious denials)", n, limit-Workers)
	}
	// Phase 2: a logical clock orders starts and ends of requests.
	var seq, admitted2 atomic.Int64
	firstDenialEnd := atomic.Int64{}
	firstDenialEnd.Store(1 << 62)
	lastAdmitStart := atomic.Int64{}
	err = hammer(requests-(limit-Workers), func(i int) error {
		start := seq.Add(1)
		ok, err := ask(i)
		end := seq.Add(1)
		if err != nil {
			return err
		}
		if ok {
			admitted2.Add(1)
			for v := lastAdmitStart.Load(); start > v && !lastAdmitStart.CompareAndSwap(v, start); v = lastAdmitStart.Load() {
			}
		} else {
			for v := firstDenialEnd.Load(); end < v && !firstDenialEnd.CompareAndSwap(v, end); v = firstDenialEnd.Load() {
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	total := int64(limit-Workers) - denied1.Load() + admitted2.Load()
	if total != int64(limit) {
		t.Errorf("%d goroutines, %d requests, limit %d: admitted %d; want exactly %d", Workers, requests, limit, total, limit)
	}
	if firstDenialEnd.Load() < lastAdmitStart.Load() {
		t.Errorf("phase 2: a denial completed (at %d) before an admitted request was sent (at %d): it was denied while quota was left",
			firstDenialEnd.Load(), lastAdmitStart.Load())
	}
}

// testConcurrentDistinctKeys: 1,000 keys with a limit of 2 get 3 requests
// each, interleaved over 64 goroutines; every key gets exactly 2. (Quick:
// a limit of 1 and 2 requests a key; Serialized: 250 keys.)
func (s *suite) testConcurrentDistinctKeys(t *testing.T) {
	e := s.env(t)
	keys := 1000
	if s.opts.Serialized {
		keys = 250
	}
	limit := int64(2)
	if s.opts.Quick {
		limit = 1
	}
	perKey := int(limit) + 1
	l := e.limiter("many", limit, time.Hour)
	admitted := make([]atomic.Int64, keys)
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
// whatever the interleaving: denied batches spend nothing. (Quick: 150
// batches, limits 100 and 50.)
func (s *suite) testConcurrentBatch(t *testing.T) {
	e := s.env(t)
	n := int64(100)
	if s.opts.Quick {
		n = 50
	}
	a := e.limiter("cbatch-a", 2*n, time.Hour)
	b := e.limiter("cbatch-b", n, time.Hour)
	ba, bb := a.l.(edgelimit.BatchLimiter), b.l.(edgelimit.BatchLimiter)
	var admitted atomic.Int64
	err := hammer(int(3*n), func(i int) error {
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
	if got := admitted.Load(); got != n {
		t.Errorf("admitted %d batches, want exactly %d (b's limit)", got, n)
	}
	if d := a.allow("k", 1); !d.Allowed || d.Remaining != n-1 {
		t.Errorf("cbatch-a.Allow after the batches = %+v, want allowed with Remaining %d (%d spent by admitted batches, none by denied ones)", d, n-1, n)
	}
	if d := b.allow("k", 1); d.Allowed {
		t.Errorf("cbatch-b.Allow after the batches = %+v, want denied", d)
	}
}
