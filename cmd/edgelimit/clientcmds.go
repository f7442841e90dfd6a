package main

import (
	"context"
	"flag"
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

// runKeygen prints a new key ring entry for EDGELIMIT_SECRETS.
func runKeygen(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: edgelimit keygen\n\nPrints a new random key ring entry (kid:base64, 32 bytes) for EDGELIMIT_SECRETS.\nPut the new entry first to sign with it; keep the old ones after it until their tokens expire.")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	fmt.Fprintln(stdout, signedwindow.NewKey())
	return 0
}

// runSolve prints a proof for a challenge.
func runSolve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("solve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	maxBits := fs.Int("max-bits", client.DefaultMaxBits, "refuse challenges harder than this")
	verbose := fs.Bool("v", false, "print the difficulty and time taken on stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: edgelimit solve [-v] [-max-bits N] CHALLENGE\n\nSolves a proof-of-work challenge (the Edgelimit-Challenge header of a 429) on every core\nand prints the proof to send back in the Edgelimit-Proof header.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	challenge := strings.TrimSpace(fs.Arg(0))
	st, err := pow.ParseChallenge(challenge)
	if err != nil {
		fmt.Fprintf(stderr, "edgelimit solve: %v\n", err)
		return 1
	}
	start := time.Now()
	proof, err := (&pow.Solver{MaxBits: *maxBits}).Solve(ctx, challenge)
	if err != nil {
		fmt.Fprintf(stderr, "edgelimit solve: %v\n", err)
		return 1
	}
	if *verbose {
		fmt.Fprintf(stderr, "solved %d bits in %s (challenge expires %s)\n", st.Bits, time.Since(start).Round(time.Millisecond), st.Expires.Format(time.RFC3339))
	}
	fmt.Fprintln(stdout, proof)
	return 0
}

type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

// runGet is a small curl-like client that keeps tokens, solves challenges
// and retries: edgelimit's reference client.
func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	fs.SetOutput(stderr)
	method := fs.String("X", "GET", "request method")
	data := fs.String("d", "", "request body")
	count := fs.Int("n", 1, "send the request this many times, keeping tokens between them")
	include := fs.Bool("i", false, "print the status line and response headers")
	output := fs.String("o", "", "write the response body to FILE instead of stdout (the last response's, with -n)")
	verbose := fs.Bool("v", false, "say on stderr what the client does (challenges, proofs, waits)")
	noWait := fs.Bool("no-wait", false, "return a 429 without a challenge at once instead of waiting for Retry-After")
	maxBits := fs.Int("max-bits", client.DefaultMaxBits, "refuse challenges harder than this")
	var headers headerFlags
	fs.Var(&headers, "H", "request header 'Name: value' (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: edgelimit get [flags] URL\n\nSends a request the way an edgelimit-aware client should: keeps the Edgelimit-Token,\nsolves proof-of-work challenges and retries, and honours Retry-After.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || *count < 1 {
		fs.Usage()
		return 2
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "edgelimit get: %q is not an http(s) URL\n", fs.Arg(0))
		return 2
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
	code := 0
	for i := 0; i < *count; i++ {
		req, err := http.NewRequestWithContext(ctx, *method, u.String(), strings.NewReader(*data))
		if err != nil {
			fmt.Fprintf(stderr, "edgelimit get: %v\n", err)
			return 2
		}
		for _, h := range headers {
			k, v, ok := strings.Cut(h, ":")
			if !ok {
				fmt.Fprintf(stderr, "edgelimit get: header %q is not 'Name: value'\n", h)
				return 2
			}
			req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		resp, err := hc.Do(req)
		if err != nil {
			fmt.Fprintf(stderr, "edgelimit get: %v\n", err)
			return 1
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil {
			fmt.Fprintf(stderr, "edgelimit get: reading the body: %v\n", err)
			return 1
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
