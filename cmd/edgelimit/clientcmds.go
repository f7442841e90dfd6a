package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/client"
	"github.com/edgelimit/edgelimit/pow"
	"github.com/edgelimit/edgelimit/signedwindow"
)

const keygenUsage = `usage: edgelimit keygen

Prints a new random key ring entry (kid:base64, 32 bytes) for EDGELIMIT_SECRETS.
Put the new entry first to sign with it; keep the old ones after it until their tokens expire.
`

// runKeygen prints a new key ring entry for EDGELIMIT_SECRETS.
func runKeygen(args []string, stdout, stderr io.Writer) int {
	c := newCmdline("keygen", keygenUsage)
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return c.usageError(stderr, "takes no arguments, got %q", pos)
	}
	fmt.Fprintln(stdout, signedwindow.NewKey())
	return exitOK
}

const solveUsage = `usage: edgelimit solve [-v] [-max-bits N] CHALLENGE

Solves a proof-of-work challenge (the Edgelimit-Challenge header of a 429) on every core
and prints the proof to send back in the Edgelimit-Proof header.
`

// runSolve prints a proof for a challenge.
func runSolve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCmdline("solve", solveUsage)
	maxBits := c.fs.Int("max-bits", client.DefaultMaxBits, "refuse challenges harder than this")
	verbose := c.fs.Bool("v", false, "print the difficulty and time taken on stderr")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(stderr, "want one CHALLENGE, got %d arguments", len(pos))
	}
	challenge := strings.TrimSpace(pos[0])
	st, err := pow.ParseChallenge(challenge)
	if err != nil {
		return c.fail(stderr, err)
	}
	start := time.Now()
	proof, err := (&pow.Solver{MaxBits: *maxBits}).Solve(ctx, challenge)
	if err != nil {
		return c.fail(stderr, err)
	}
	if *verbose {
		fmt.Fprintf(stderr, "solved %d bits in %s (challenge expires %s)\n", st.Bits, time.Since(start).Round(time.Millisecond), st.Expires.Format(time.RFC3339))
	}
	fmt.Fprintln(stdout, proof)
	return exitOK
}

type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

const getUsage = `usage: edgelimit get [flags] URL

Sends a request the way an edgelimit-aware client should: keeps the Edgelimit-Token,
solves proof-of-work challenges and retries, and honours Retry-After. Exits 1 when a
response is a 4xx or 5xx.
`

// runGet is a small curl-like client that keeps tokens, solves challenges
// and retries: edgelimit's reference client.
func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCmdline("get", getUsage)
	fs := c.fs
	method := fs.String("X", "GET", "request method")
	data := fs.String("d", "", "request body")
	count := fs.Int("n", 1, "send the request this many times, keeping tokens between them")
	include := fs.Bool("i", false, "print the status line and response headers")
	output := fs.String("o", "", "write the response body to FILE instead of stdout (the last response's, with -n)")
	verbose := fs.Bool("v", false, "say on stderr what the client does (challenges, proofs, waits) and each response's status line")
	noWait := fs.Bool("no-wait", false, "return a 429 without a challenge at once instead of waiting for Retry-After")
	maxBits := fs.Int("max-bits", client.DefaultMaxBits, "refuse challenges harder than this")
	var headers headerFlags
	fs.Var(&headers, "H", "request header 'Name: value' (repeatable)")
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(stderr, "want one URL, got %d arguments", len(pos))
	}
	if *count < 1 {
		return c.usageError(stderr, "-n %d: want at least 1", *count)
	}
	u, err := url.Parse(pos[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c.usageError(stderr, "%q is not an http(s) URL", pos[0])
	}
	for _, h := range headers {
		if _, _, ok := strings.Cut(h, ":"); !ok {
			return c.usageError(stderr, "header %q is not 'Name: value'", h)
		}
	}
	tr := &client.Transport{NoWait: *noWait, MaxBits: *maxBits}
	if *verbose {
		tr.Observe = func(ev client.Event) {
			switch ev.Kind {
			case client.EventChallenge:
				fmt.Fprintf(stderr, "* challenge: %d bits, solving\n", ev.Bits)
			case client.EventSolved:
				fmt.Fprintf(stderr, "* solved in %s, retrying with the proof\n", ev.Took.Round(time.Millisecond))
			case client.EventWait:
				fmt.Fprintf(stderr, "* 429: waiting %s (Retry-After)\n", ev.Wait)
			case client.EventToken:
				fmt.Fprintln(stderr, "* kept a new Edgelimit-Token")
			case client.EventGiveUp:
				fmt.Fprintf(stderr, "* giving up: %s\n", ev.Reason)
			}
		}
	}
	hc := tr.Client()
	code = exitOK
	for i := 0; i < *count; i++ {
		req, err := http.NewRequestWithContext(ctx, *method, u.String(), strings.NewReader(*data))
		if err != nil {
			return c.usageError(stderr, "%v", err)
		}
		for _, h := range headers {
			k, v, _ := strings.Cut(h, ":")
			req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		resp, err := hc.Do(req)
		if err != nil {
			return c.fail(stderr, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil {
			fmt.Fprintf(stderr, "edgelimit get: reading the body: %v\n", err)
			return 1
		}
		if *verbose {
			fmt.Fprintf(stderr, "< %s %s\n", resp.Proto, resp.Status)
		}
		if *include {
			fmt.Fprintf(stdout, "%s %s\n", resp.Proto, resp.Status)
			names := make([]string, 0, len(resp.Header))
			for k := range resp.Header {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				for _, v := range resp.Header[k] {
					fmt.Fprintf(stdout, "%s: %s\n", k, v)
				}
			}
			fmt.Fprintln(stdout)
		}
		if *output != "" {
			if err := os.WriteFile(*output, body, 0o644); err != nil {
				fmt.Fprintf(stderr, "edgelimit get: %v\n", err)
				return 1
			}
		} else {
			stdout.Write(body)
			if len(body) > 0 && body[len(body)-1] != '\n' {
				fmt.Fprintln(stdout)
			}
		}
		if resp.StatusCode >= 400 {
			code = 1
		}
	}
	return code
}

// keyRing reads EDGELIMIT_SECRETS, or makes an ephemeral ring for one
// local process and says so.
func keyRing(stderr io.Writer) (*signedwindow.KeyRing, error) {
	s := os.Getenv(signedwindow.EnvSecrets)
	if strings.TrimSpace(s) == "" {
		fmt.Fprintln(stderr, "edgelimit serve: EDGELIMIT_SECRETS not set; signing tokens and challenges with an ephemeral dev key (tokens die with this process; run `edgelimit keygen` for a real one)")
		return signedwindow.EphemeralKeyRing(), nil
	}
	return signedwindow.ParseKeyRing(s)
}
