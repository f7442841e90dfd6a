package powgate_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/powgate"
)

// benchKeys are distinct keys hashed as the engine hashes them, so that
// the benchmarks measure a spread of keys, not one hot key.
var benchKeys = limitertest.HashedKeys("search", 100_000)

// benchLimit is a limit no benchmark reaches.
const benchLimit = 1_000_000_000 // kv's largest

// benchGate is a Gate on a fresh inner limiter with a limit no benchmark
// reaches, the clock frozen (so that challenges stay valid).
func benchGate(b *testing.B, in inner, o powgate.Options) (gate, innerL edgelimit.Limiter) {
	b.Helper()
	pol := &policy.Policy{Name: "search", Limit: benchLimit, Window: time.Hour}
	now := func() time.Time { return t0 }
	innerL = in.new(b, pol, now)
	gate, err := powgate.Wrap(innerL, powgate.Config{Policy: pol, Options: o, Secrets: [][]byte{secret}, Now: now})
	if err != nil {
		b.Fatal(err)
	}
	return gate, innerL
}

// parallel calls f from every benchmark goroutine, with distinct keys.
func parallel(b *testing.B, f func(key string) edgelimit.Decision, check func(edgelimit.Decision) bool) {
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 7919
		for pb.Next() {
			i = (i + 1) % len(benchKeys)
			if d := f(benchKeys[i]); !check(d) {
				b.Errorf("unexpected decision %+v", d)
				return
			}
		}
	})
}

func allowed(d edgelimit.Decision) bool { return d.Allowed }

// BenchmarkGate compares, per inner limiter: the inner limiter alone
// (baseline); the Gate below its threshold (a peek, then the inner Allow);
// a challenged request (a peek and a challenge: nothing spent); and an
// admission paid by a proof (the proof verified and spent, then the inner
// Allow).
func BenchmarkGate(b *testing.B) {
	for _, in := range []inner{inners[1], kvInner} {
		b.Run(in.name+"/inner-alone", func(b *testing.B) {
			_, l := benchGate(b, in, powgate.Options{})
			parallel(b, func(key string) edgelimit.Decision {
				d, _ := l.Allow(ctx, edgelimit.Request{Key: key})
				return d
			}, allowed)
		})
		b.Run(in.name+"/below-threshold", func(b *testing.B) {
			g, _ := benchGate(b, in, powgate.Options{Above: benchLimit - 1})
			parallel(b, func(key string) edgelimit.Decision {
				d, _ := g.Allow(ctx, edgelimit.Request{Key: key})
				return d
			}, allowed)
		})
		b.Run(in.name+"/challenge", func(b *testing.B) {
			// A peek and a challenge, nothing written.
			g, _ := benchGate(b, in, powgate.Options{Above: 0})
			parallel(b, func(key string) edgelimit.Decision {
				d, _ := g.Allow(ctx, edgelimit.Request{Key: key})
				return d
			}, powgate.Challenged)
		})
		b.Run(in.name+"/paid-by-proof", func(b *testing.B) {
			// Bits 1, so that solving b.N challenges beforehand is cheap:
			// verification costs the same whatever the bits.
			g, _ := benchGate(b, in, powgate.Options{Above: 0, Bits: 1, TTL: pow.MaxTTL})
			reqs := make([]edgelimit.Request, b.N)
			for i := range reqs {
				key := benchKeys[i%len(benchKeys)]
				d, _ := g.Allow(ctx, edgelimit.Request{Key: key})
				reqs[i] = edgelimit.Request{Key: key, Header: limitertest.Headers{"edgelimit-proof": solve(b, challengeOf(d))}}
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, _ := g.Allow(ctx, reqs[next.Add(1)-1]); !d.Allowed || !powgate.Paid(d) {
						b.Errorf("unexpected decision %+v", d)
						return
					}
				}
			})
		})
	}
}

// BenchmarkReplayedProof: a request replaying a spent proof: verified
// (one SHA-256, one HMAC), refused by the replay cache, then peeked and
// challenged.
func BenchmarkReplayedProof(b *testing.B) {
	g, _ := benchGate(b, inners[1], powgate.Options{Above: 0, Bits: 1, TTL: pow.MaxTTL})
	d, _ := g.Allow(ctx, edgelimit.Request{Key: keyA})
	req := edgelimit.Request{Key: keyA, Header: limitertest.Headers{"edgelimit-proof": solve(b, challengeOf(d))}}
	if d, _ := g.Allow(ctx, req); !d.Allowed {
		b.Fatal(d)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if d, _ := g.Allow(ctx, req); !powgate.Challenged(d) {
			b.Fatal(d)
		}
	}
}
