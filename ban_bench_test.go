package edgelimit_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/bans"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/memory"
)

// bannedEngine is file's engine on the in-process durable backend and the
// memory ban store, on a clock that stands still, with key "k" spent: with
// banPolicy, banned (two denials in a row), its 429 naming the ban;
// without the ban, over its quota, an ordinary 429.
func bannedEngine(tb testing.TB, file string, banned bool) *edgelimit.Engine {
	tb.Helper()
	clock := limitertest.NewClock(limitertest.WindowStart(limitertest.T0, time.Hour))
	f, err := policy.Parse("ban.yaml", []byte(file))
	if err != nil {
		tb.Fatal(err)
	}
	build, err := setup.Limiters(f, []setup.Backend{memory.Durable()}, setup.BackendEnv{Getenv: func(string) string { return "" }})
	if err != nil {
		tb.Fatal(err)
	}
	e, err := edgelimit.New(edgelimit.Config{Policies: f, HashSecret: []byte(strings.Repeat("k", 32)), Now: clock.Now,
		Bans: bans.NewMemory(clock.Now), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Limiters: build})
	if err != nil {
		tb.Fatal(err)
	}
	for range 3 {
		decideKey(e, "k").Release()
	}
	if v := decideKey(e, "k"); v.Status != 429 || strings.Contains(string(v.Body), `"ban":{`) != banned {
		tb.Fatalf("%d %s, want a 429 (naming a ban: %v)", v.Status, v.Body, banned)
	}
	return e
}

func decideKey(e *edgelimit.Engine, key string) *edgelimit.Verdict {
	return e.Decide(context.Background(), &edgelimit.Input{Method: "GET", Path: "/v", SourceIP: "192.0.2.1",
		Header: limitertest.Headers{"X-Api-Key": key}})
}

// BenchmarkBannedKey: a banned key's 429 (its ban read from the ban
// cache, the body naming the ban) beside an ordinary 429 of the same
// policy.
func BenchmarkBannedKey(b *testing.B) {
	for _, tc := range []struct {
		name   string
		file   string
		banned bool
	}{{"banned", banPolicy, true}, {"ordinary", noBan(b), false}} {
		e := bannedEngine(b, tc.file, tc.banned)
		b.Run(tc.name, func(b *testing.B) {
			in := &edgelimit.Input{Method: "GET", Path: "/v", SourceIP: "192.0.2.1", Header: limitertest.Headers{"X-Api-Key": "k"}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				e.Decide(ctx, in).Release()
			}
		})
	}
}

// noBan is banPolicy without its ban.
func noBan(tb testing.TB) string {
	i := strings.Index(banPolicy, "    ban: {")
	if i < 0 {
		tb.Fatal("banPolicy has no ban")
	}
	return banPolicy[:i]
}

// TestBannedKeyAllocations: a banned key's 429, whose detail and ban
// member are rendered once per ban (not per request), allocates what an
// ordinary 429 does: the request's own memory. It counts allocations,
// not time; the race detector's own are left out.
func TestBannedKeyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		file   string
		banned bool
	}{{"banned", banPolicy, true}, {"ordinary", noBan(t), false}} {
		e := bannedEngine(t, tc.file, tc.banned)
		in := &edgelimit.Input{Method: "GET", Path: "/v", SourceIP: "192.0.2.1", Header: limitertest.Headers{"X-Api-Key": "k"}}
		first := decideKey(e, "k")
		body := string(first.Body)
		first.Release()
		got := testing.AllocsPerRun(200, func() {
			v := e.Decide(ctx, in)
			if v.Status != 429 || string(v.Body) != body {
				t.Fatalf("%s: %d %s, want the 429 %s", tc.name, v.Status, v.Body, body)
			}
			v.Release()
		})
		if got > 1 {
			t.Errorf("%s key's 429: %v allocations, want at most 1 (the request's memory)", tc.name, got)
		}
	}
}
