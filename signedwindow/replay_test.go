package signedwindow

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
)

// The replay simulation: a client that replays tokens and proofs against a
// fleet of instances (separate Limiters, each with its own replay cache,
// sharing the key ring and one injected clock). It sends simRequests
// requests spread over one window and counts what is admitted. The numbers
// are in the package documentation, docs/signed.md and the README; this
// test pins them.
const (
	simLimit    = 10
	simWindow   = time.Minute
	simRequests = 1000
)

type fleet struct {
	insts []*fixture
	clock *clock
	tick  time.Duration
	sent  int
}

func newFleet(t *testing.T, n, bits int) *fleet {
	keys := ring(t)
	c := newClock(t0)
	fl := &fleet{clock: c, tick: simWindow / simRequests}
	for i := range n {
		l, err := New(Config{Policy: signedPolicy("tts", simLimit, simWindow, bits), Keys: keys, Now: c.Now, Rand: seeded(byte(i))})
		if err != nil {
			t.Fatal(err)
		}
		fl.insts = append(fl.insts, &fixture{l: l, clock: c, keys: keys})
	}
	return fl
}

// send delivers one request to instance i and advances the clock; it
// returns the decision, or ok false once the budget is spent.
func (fl *fleet) send(i int, token, proof string) (edgelimit.Decision, bool) {
	if fl.sent >= simRequests {
		return edgelimit.Decision{}, false
	}
	fl.sent++
	d, _ := fl.insts[i].l.Allow(context.Background(), withState(edgelimit.Request{Key: keyA, Cost: 1}, token, proof))
	fl.clock.Add(fl.tick)
	return d, true
}

// proof obtains one challenge (from instance 0) and solves it.
func (fl *fleet) proof(t *testing.T) string {
	d, _ := fl.send(0, "", "")
	return solve(t, challengeOf(d))
}

type strategy struct {
	name string
	run  func(t *testing.T, fl *fleet) int // returns requests admitted
}

var strategies = []strategy{
	{"honest client: one proof, follows its token", func(t *testing.T, fl *fleet) int {
		proof, tok, n := fl.proof(t), "", 0
		for i := 0; ; i++ {
			d, ok := fl.send(i%len(fl.insts), tok, proof)
			if !ok || !d.Allowed {
				return n
			}
			n, tok = n+1, tokenOf(d)
		}
	}},
	{"replays its first token, round-robin", func(t *testing.T, fl *fleet) int {
		proof := fl.proof(t)
		d, _ := fl.send(0, "", proof)
		n, first := 1, tokenOf(d)
		for i := 0; ; i++ {
			d, ok := fl.send(i%len(fl.insts), first, "")
			if !ok {
				return n
			}
			if d.Allowed {
				n++
			}
		}
	}},
	{"replays its proof, round-robin", func(t *testing.T, fl *fleet) int {
		proof, n := fl.proof(t), 0
		for i := 0; ; i++ {
			d, ok := fl.send(i%len(fl.insts), "", proof)
			if !ok {
				return n
			}
			if d.Allowed {
				n++
			}
		}
	}},
	{"best replay, client picks the instance", func(t *testing.T, fl *fleet) int {
		// Walk a chain on every instance from the one proof, then try every
		// token collected, and the proof, on every instance again.
		proof, n := fl.proof(t), 0
		var all []string
		for i := range fl.insts {
			tok := ""
			for {
				d, ok := fl.send(i, tok, proof)
				if !ok || !d.Allowed {
					break
				}
				n, tok = n+1, tokenOf(d)
				all = append(all, tok)
			}
		}
		for _, tok := range append(all, "") {
			for i := range fl.insts {
				if d, ok := fl.send(i, tok, proof); ok && d.Allowed {
					n++
				}
			}
		}
		return n
	}},
	{"best replay, random routing", func(t *testing.T, fl *fleet) int {
		// The client cannot pick the instance: with each request it sends
		// the proof and one of the tokens it holds, picked at random (a low
		// count may still be unspent on the instance it lands on).
		r := mrand.New(mrand.NewPCG(1, 2))
		proof, n := fl.proof(t), 0
		toks := []string{""}
		for {
			tok := toks[r.IntN(len(toks))]
			d, ok := fl.send(r.IntN(len(fl.insts)), tok, proof)
			if !ok {
				return n
			}
			if d.Allowed {
				n++
				toks = append(toks, tokenOf(d))
			}
		}
	}},
}

func TestReplaySimulation(t *testing.T) {
	want := map[string][2]int{ // admitted with 1 and with 10 instances
		"honest client: one proof, follows its token": {10, 10},
		"replays its first token, round-robin":        {2, 11},
		"replays its proof, round-robin":              {1, 10},
		"best replay, client picks the instance":      {10, 100},
		"best replay, random routing":                 {10, 65},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "limit %d per %v, %d requests in the window, bits 8\n", simLimit, simWindow, simRequests)
	fmt.Fprintf(&table, "| %-45s | %11s | %12s |\n", "client", "1 instance", "10 instances")
	for _, s := range strategies {
		var got [2]int
		for j, n := range []int{1, 10} {
			got[j] = s.run(t, newFleet(t, n, 8))
		}
		fmt.Fprintf(&table, "| %-45s | %11d | %12d |\n", s.name, got[0], got[1])
		if got != want[s.name] {
			t.Errorf("%s: admitted %v with 1 and 10 instances, want %v", s.name, got, want[s.name])
		}
		if got[0] > simLimit || got[1] > 10*simLimit {
			t.Errorf("%s: admitted %v, above the bound limit × instances", s.name, got)
		}
	}
	// For contrast: no proof of work (dropping the token resets the count),
	// and no replay cache (each request meets a fresh cache).
	for j, n := range []int{1, 10} {
		fl := newFleet(t, n, 0)
		free := 0
		for i := 0; ; i++ {
			d, ok := fl.send(i%n, "", "")
			if !ok {
				break
			}
			if d.Allowed {
				free++
			}
		}
		nocache := 0
		fl = newFleet(t, 1, 8)
		proof := fl.proof(t)
		d, _ := fl.send(0, "", proof)
		first := tokenOf(d)
		for fl.sent < simRequests {
			fresh := newFleet(t, 1, 8)
			fresh.clock.Set(fl.clock.Now())
			if d, _ := fresh.send(0, first, ""); d.Allowed {
				nocache++
			}
			fl.sent++
			fl.clock.Add(fl.tick)
		}
		if j == 0 {
			fmt.Fprintf(&table, "| %-45s | %11d | %12s |\n", "no proof_of_work, token dropped each time", free, "")
			fmt.Fprintf(&table, "| %-45s | %11d | %12s |\n", "(no replay cache) replays its first token", nocache+1, "")
		}
		if free != simRequests || nocache != simRequests-2 {
			t.Errorf("contrast runs: %d free, %d without cache; want every request", free, nocache)
		}
	}
	t.Logf("replay simulation:\n%s", table.String())
}
