package client

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgelimit/edgelimit/pow"
)

// Header names of the protocol (the same as package edgelimit's).
const (
	HeaderToken      = "Edgelimit-Token"
	HeaderChallenge  = "Edgelimit-Challenge"
	HeaderProof      = "Edgelimit-Proof"
	headerRetryAfter = "Retry-After"
)

// Defaults of Transport.
const (
	DefaultMaxRetries = 3
	DefaultMaxWait    = time.Minute
	// DefaultMaxBits is the hardest challenge solved by default: 2^26 hashes,
	// seconds of CPU. A server asking for more gets its 429 back.
	DefaultMaxBits = 26
)

// Transport is an http.RoundTripper that speaks edgelimit's protocol for
// signed-window policies, so that a caller sees only the final responses:
//
//   - it keeps the Edgelimit-Token of every response in Jar and sends the
//     tokens back to the same origin;
//   - on a 429 that carries Edgelimit-Challenge, it solves the challenge
//     (pow.Solver, every core) and retries with Edgelimit-Proof; proofs
//     solved for one request are all sent on its retries, so a route guarded
//     by several proof-of-work policies is satisfied one challenge at a time;
//   - on a 429 without a challenge, it waits for Retry-After (up to MaxWait)
//     and retries, unless NoWait is set.
//
// Retries are bounded by MaxRetries and stop when the request's context
// ends. A request with a body is retried only if it has GetBody (as
// requests made by http.NewRequest from a bytes or strings reader do);
// otherwise its 429 is returned. Concurrent requests through one Transport
// share the jar; two of them sent with the same token before either
// returns may make one spend a new proof (each count of a token is spent
// once per server instance).
//
// The zero Transport is ready to use; its fields must not change once it is
// in use.
type Transport struct {
	// Base sends the requests; default http.DefaultTransport.
	Base http.RoundTripper
	// Jar keeps the tokens; default a jar of this Transport's own.
	Jar *Jar
	// MaxRetries bounds the retries of one request (each after a challenge
	// or a wait); default DefaultMaxRetries (3); negative means none.
	MaxRetries int
	// NoWait makes a 429 without a challenge return at once instead of
	// waiting for its Retry-After.
	NoWait bool
	// MaxWait is the longest Retry-After waited for; a longer one is
	// returned to the caller. Default DefaultMaxWait (1 minute).
	MaxWait time.Duration
	// MaxBits refuses (returns the 429 for) challenges harder than this;
	// default DefaultMaxBits (26).
	MaxBits int
	// Solve finds a proof for a challenge; default a pow.Solver using every
	// core, limited to MaxBits.
	Solve func(ctx context.Context, challenge string) (string, error)
	// Sleep waits for d or until ctx ends; default a timer. Tests replace it
	// to move a fake clock instead.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock for token expiry and Retry-After dates; default
	// time.Now.
	Now func() time.Time
	// Observe, if set, is told what the Transport does, for verbose output.
	Observe func(Event)

	once sync.Once
	jar  *Jar
}

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	EventChallenge EventKind = iota + 1 // a 429 carried a challenge: solving it
	EventSolved                         // a proof was found: retrying with it
	EventWait                           // a 429 without challenge: waiting for Retry-After
	EventToken                          // a response carried a new token
	EventGiveUp                         // a 429 is returned to the caller
)

func (k EventKind) String() string {
	switch k {
	case EventChallenge:
		return "challenge"
	case EventSolved:
		return "solved"
	case EventWait:
		return "wait"
	case EventToken:
		return "token"
	case EventGiveUp:
		return "give-up"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one step of a request, for Transport.Observe.
type Event struct {
	Kind EventKind
	// URL is the request's URL, with any password redacted.
	URL string
	// Attempt is 0 for the first try of a request, then 1, 2, ...
	Attempt int
	// Bits is the challenge's difficulty (EventChallenge, EventSolved).
	Bits int
	// Took is how long solving took (EventSolved), by Transport.Now.
	Took time.Duration
	// Wait is the Retry-After being honoured (EventWait).
	Wait time.Duration
	// Reason says why a 429 is returned (EventGiveUp).
	Reason string
}

// Client returns an http.Client that sends through t.
func (t *Transport) Client() *http.Client { return &http.Client{Transport: t} }

func (t *Transport) init() {
	t.once.Do(func() {
		t.jar = t.Jar
		if t.jar == nil {
			t.jar = NewJar()
		}
	})
}

// Tokens returns the jar in use (Jar, or the Transport's own).
func (t *Transport) Tokens() *Jar {
	t.init()
	return t.jar
}

func (t *Transport) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t *Transport) observe(e Event) {
	if t.Observe != nil {
		t.Observe(e)
	}
}

func (t *Transport) maxRetries() int {
	switch {
	case t.MaxRetries < 0:
		return 0
	case t.MaxRetries == 0:
		return DefaultMaxRetries
	}
	return t.MaxRetries
}

func (t *Transport) maxBits() int {
	if t.MaxBits <= 0 {
		return DefaultMaxBits
	}
	return min(t.MaxBits, pow.MaxBits)
}

func (t *Transport) solve(ctx context.Context, challenge string) (string, error) {
	if t.Solve != nil {
		return t.Solve(ctx, challenge)
	}
	s := pow.Solver{MaxBits: t.maxBits()}
	return s.Solve(ctx, challenge)
}

func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if t.Sleep != nil {
		return t.Sleep(ctx, d)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// RoundTrip implements http.RoundTripper. It does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.init()
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	ctx := req.Context()
	where := req.URL.Redacted()
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	var proofs []string
	for attempt := 0; ; attempt++ {
		r := req.Clone(ctx)
		if attempt > 0 && req.Body != nil && req.Body != http.NoBody {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			r.Body = body
		}
		if req.Header.Get(HeaderToken) == "" {
			if h := t.jar.Header(req.URL, t.now()); h != "" {
				r.Header.Set(HeaderToken, h)
			}
		}
		if len(proofs) > 0 {
			r.Header.Set(HeaderProof, strings.Join(proofs, ", "))
		}
		resp, err := base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		if tok := resp.Header.Get(HeaderToken); tok != "" {
			t.jar.Store(req.URL, tok, t.now())
			t.observe(Event{Kind: EventToken, URL: where, Attempt: attempt})
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			return resp, nil
		}
		giveUp := func(reason string) (*http.Response, error) {
			t.observe(Event{Kind: EventGiveUp, URL: where, Attempt: attempt, Reason: reason})
			return resp, nil
		}
		switch {
		case attempt >= t.maxRetries():
			return giveUp("retries exhausted")
		case !replayable:
			return giveUp("the request body cannot be sent again (no GetBody)")
		}
		if list := resp.Header.Get(HeaderChallenge); list != "" {
			// One challenge per policy that asks for work, as a list: solve
			// them all, and send every proof back.
			var challenges []string
			var stmts []pow.Statement
			for _, ch := range strings.Split(list, ",") {
				ch = strings.TrimSpace(ch)
				st, err := pow.ParseChallenge(ch)
				switch {
				case err != nil:
					return giveUp("unreadable challenge: " + err.Error())
				case st.Bits > t.maxBits():
					return giveUp("challenge of " + strconv.Itoa(st.Bits) + " bits is harder than MaxBits " + strconv.Itoa(t.maxBits()))
				}
				challenges, stmts = append(challenges, ch), append(stmts, st)
			}
			discard(resp)
			for i, ch := range challenges {
				t.observe(Event{Kind: EventChallenge, URL: where, Attempt: attempt, Bits: stmts[i].Bits})
				start := t.now()
				proof, err := t.solve(ctx, ch)
				if err != nil {
					return nil, err
				}
				t.observe(Event{Kind: EventSolved, URL: where, Attempt: attempt, Bits: stmts[i].Bits, Took: t.now().Sub(start)})
				proofs = appendProof(proofs, proof, t.now())
			}
			continue
		}
		if t.NoWait {
			return giveUp("429 without a challenge (NoWait)")
		}
		wait, ok := retryAfter(resp.Header.Get(headerRetryAfter), t.now())
		maxWait := t.MaxWait
		if maxWait <= 0 {
			maxWait = DefaultMaxWait
		}
		switch {
		case !ok:
			return giveUp("429 without a challenge or Retry-After")
		case wait > maxWait:
			return giveUp("Retry-After " + wait.String() + " is longer than MaxWait " + maxWait.String())
		}
		discard(resp)
		t.observe(Event{Kind: EventWait, URL: where, Attempt: attempt, Wait: wait})
		if err := t.sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// appendProof adds proof to the list, dropping proofs whose challenges have
// expired and keeping at most 8.
func appendProof(proofs []string, proof string, now time.Time) []string {
	kept := proofs[:0]
	for _, p := range proofs {
		ch, _, _ := strings.Cut(p, ".")
		if st, err := pow.ParseChallenge(ch); err == nil && now.Before(st.Expires) {
			kept = append(kept, p)
		}
	}
	if len(kept) >= 8 {
		kept = kept[1:]
	}
	return append(kept, proof)
}

// retryAfter parses Retry-After: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, 1<<32)) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// discard reads a little of an abandoned response, so the connection can be
// reused, and closes it.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}
