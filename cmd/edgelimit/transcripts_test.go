package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/setup"
)

var updateDocs = flag.Bool("update-docs", false, "write the outputs TestDocTranscripts saw into the README and docs")

// TestDocTranscripts runs every console transcript of the README's "Try
// it: make run" and of docs/quotas.md: each command (edgelimit in-process,
// curl emulated) against `edgelimit serve`, and compares what it prints
// with what the page shows. What depends on the time of day (t=, a
// usage's RESET, Retry-After, a grant's end), the port and the time a
// proof took are compared as their shape.
//
//	go run ./internal/tools/testservers -only dynalite -- go test -count=1 -run TestDocTranscripts ./cmd/edgelimit/ -update-docs
//
// writes the outputs of a run into the pages.
//
// What differs from a reader's run: serve listens on a free port; the
// README's tour runs against the embedded example policies (what make run
// serves), started by the test; and docs/quotas.md's policies get
// store_timeout: 5s, for the shared test servers (a call the 100 ms
// default cancels mid-request can crash dynalite).
func TestDocTranscripts(t *testing.T) {
	t.Run("README", func(t *testing.T) {
		t.Setenv(setup.EnvHashKey, "")
		t.Setenv(setup.EnvSecrets, "")
		t.Setenv(setup.EnvPolicyFile, "")
		sh := &transcript{t: t, serve: startServe(t)}
		runTranscripts(t, sh, "README.md", "\n## Try it: make run\n")
	})
	t.Run("docs/quotas.md", func(t *testing.T) {
		quotaEnv(t)
		raw := readDoc(t, "docs/quotas.md")
		blocks := fencedBlocks(raw)
		if len(blocks) == 0 || blocks[0].lang != "yaml" || !strings.HasPrefix(blocks[0].body, "# quotas.yaml\n") {
			t.Fatal("docs/quotas.md's first block must be ```yaml starting with # quotas.yaml")
		}
		dir := t.TempDir()
		policy := strings.ReplaceAll(blocks[0].body, "    strategy: durable\n", "    strategy: durable\n    store_timeout: 5s\n")
		if err := os.WriteFile(filepath.Join(dir, "quotas.yaml"), []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Chdir(dir)
		awayFromDayBoundary(t)
		runTranscripts(t, &transcript{t: t}, "docs/quotas.md", "")
	})
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testDir, "..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runTranscripts runs the console blocks of the page's section (title;
// "" for the whole page) and, with -update-docs, writes what they printed.
func runTranscripts(t *testing.T, sh *transcript, name, title string) {
	t.Helper()
	path := filepath.Join(testDir, "..", "..", name)
	doc := readDoc(t, name)
	start, end := 0, len(doc)
	if title != "" {
		start = strings.Index(doc, title)
		if start < 0 {
			t.Fatalf("%s has no section %q", name, strings.TrimSpace(title))
		}
		if i := strings.Index(doc[start+len(title):], "\n## "); i >= 0 {
			end = start + len(title) + i
		}
	}
	section := doc[start:end]
	updated := section
	n := 0
	for _, b := range fencedBlocks(section) {
		if b.lang != "console" {
			continue
		}
		n++
		var out strings.Builder
		for _, s := range parseTranscript(b.body) {
			got := sh.run(s.cmd)
			if normalize(got) != normalize(s.want) {
				t.Errorf("%s: $ %s\nprinted:\n%s\nthe page shows:\n%s", name, s.cmd, got, s.want)
			}
			// The reader's serve listens on its default address.
			fmt.Fprintf(&out, "$ %s\n%s", s.cmd, portRe.ReplaceAllString(got, "http://127.0.0.1:8080"))
		}
		updated = strings.Replace(updated, "```console\n"+b.body+"```", "```console\n"+out.String()+"```", 1)
	}
	if n == 0 {
		t.Fatalf("%s shows no console transcript", name)
	}
	if *updateDocs && updated != section {
		if err := os.WriteFile(path, []byte(doc[:start]+updated+doc[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s updated", name)
	}
}

type block struct{ lang, body string }

// fencedBlocks returns the ``` blocks of s, with their language.
func fencedBlocks(s string) []block {
	var out []block
	for {
		i := strings.Index(s, "```")
		if i < 0 {
			return out
		}
		nl := strings.IndexByte(s[i:], '\n')
		lang := s[i+3 : i+nl]
		rest := s[i+nl+1:]
		j := strings.Index(rest, "```")
		if j < 0 {
			return out
		}
		out = append(out, block{lang, rest[:j]})
		s = rest[j+3:]
	}
}

type step struct{ cmd, want string }

// parseTranscript splits a console block into commands ($ ...) and what
// each printed.
func parseTranscript(body string) []step {
	var out []step
	for _, line := range strings.SplitAfter(body, "\n") {
		if line == "" {
			continue
		}
		if c, ok := strings.CutPrefix(line, "$ "); ok {
			out = append(out, step{cmd: strings.TrimSuffix(c, "\n")})
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].want += line
		}
	}
	return out
}

var (
	tRe       = regexp.MustCompile(`\bt=\d+`)
	durRe     = regexp.MustCompile(`\b(\d+h)?(\d+m)?\d+s\b|\b\d+h\d+m\b|\b\d+h\b`)
	secondsRe = regexp.MustCompile(`"reset_seconds":\d+`)
	untilRe   = regexp.MustCompile(`until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	retryRe   = regexp.MustCompile(`(?i)^retry-after: \d+`)
	solvedRe  = regexp.MustCompile(`solved in [0-9.]+(ms|s|µs)`)
	portRe    = regexp.MustCompile(`http://127\.0\.0\.1:\d+`)
	spaceRe   = regexp.MustCompile(`[ \t]+`)
)

// normalize keeps what a run's output must show and drops what depends on
// when it ran: the effective window t, a usage table's RESET, a JSON
// reset_seconds, Retry-After, a grant's end, serve's port, the time a
// proof took, and column padding.
func normalize(s string) string {
	var out []string
	table := false
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		line = tRe.ReplaceAllString(line, "t=T")
		line = secondsRe.ReplaceAllString(line, `"reset_seconds":N`)
		line = untilRe.ReplaceAllString(line, "until TIME")
		line = portRe.ReplaceAllString(line, "http://127.0.0.1:PORT")
		line = retryRe.ReplaceAllString(line, "Retry-After: N")
		line = solvedRe.ReplaceAllString(line, "solved in D")
		if table {
			f := strings.Fields(line)
			if len(f) >= 6 { // POLICY TIER LIMIT WINDOW REMAINING RESET ...
				f[5] = durRe.ReplaceAllString(f[5], "DUR")
			}
			line = strings.Join(f, " ")
		}
		table = table || strings.HasPrefix(line, "POLICY") && strings.Contains(line, "REMAINING")
		out = append(out, strings.TrimSpace(spaceRe.ReplaceAllString(line, " ")))
	}
	return strings.Join(out, "\n")
}

// awayFromDayBoundary waits, if a UTC day ends within the next minute,
// until it has: the example's quota is daily, and its numbers are one
// day's.
func awayFromDayBoundary(t *testing.T) {
	next := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if d := time.Until(next); d < time.Minute {
		t.Logf("waiting %s for the UTC day to end", d)
		time.Sleep(d + time.Second)
	}
}

// transcript runs a console block's commands.
type transcript struct {
	t     *testing.T
	serve string // the URL serve listens on
}

// testDir is the package's directory, where go test starts (the test
// then moves to a directory of its own).
var testDir, _ = os.Getwd()

func (sh *transcript) run(cmd string) string {
	t := sh.t
	t.Helper()
	switch {
	case strings.HasPrefix(cmd, "node_modules/.bin/dynalite "), strings.HasPrefix(cmd, "go install "), strings.HasPrefix(cmd, "kill "):
		return "" // the runner started dynalite; edgelimit runs in-process; the test stops serve
	case strings.HasPrefix(cmd, "export "):
		name, value, _ := strings.Cut(strings.TrimPrefix(cmd, "export "), "=")
		switch name {
		case setup.EnvEndpoint, setup.EnvHashKey: // the runner's server, quotaEnv's key
		default:
			t.Setenv(name, value)
		}
		return ""
	case strings.HasPrefix(cmd, "sleep "):
		n, err := strconv.Atoi(strings.TrimPrefix(cmd, "sleep "))
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		// serve's override cache holds what it read for the policy's
		// override_staleness of its own clock: waiting it out is what
		// the page tells the reader to do.
		time.Sleep(time.Duration(n) * time.Second)
		return ""
	case strings.HasPrefix(cmd, "for i in "):
		list, rest, ok := strings.Cut(strings.TrimPrefix(cmd, "for i in "), "; do ")
		body, after, ok2 := strings.Cut(rest, "; done")
		if !ok || !ok2 {
			t.Fatalf("%s: want `for i in 1 2 ... N; do CMD; done`", cmd)
		}
		var out strings.Builder
		for range strings.Fields(list) {
			out.WriteString(sh.run(body))
		}
		if after == "; echo" {
			out.WriteString("\n")
		} else if after != "" {
			t.Fatalf("%s: the test cannot run %q after the loop", cmd, after)
		}
		return out.String()
	case strings.HasPrefix(cmd, "curl "):
		return sh.curl(cmd)
	case strings.HasPrefix(cmd, "edgelimit serve"):
		c := strings.TrimSuffix(strings.TrimSuffix(cmd, " & SERVE=$!"), " &")
		args := words(t, strings.TrimPrefix(c, "edgelimit "))
		var out string
		sh.serve, out = startServeOutput(t, args...)
		return out
	case strings.HasPrefix(cmd, "edgelimit "), strings.HasPrefix(cmd, "bin/edgelimit "):
		args := words(t, cmd)[1:]
		for i, a := range args { // the reader's serve is on localhost:8080
			args[i] = strings.Replace(a, "http://localhost:8080", sh.serve, 1)
		}
		var out syncBuffer
		run(context.Background(), args, &out, &out)
		return out.String()
	}
	t.Fatalf("the page's transcript has a command the test cannot run: %s", cmd)
	return ""
}

// curl emulates the curl command lines the pages show: -s, -i (-si), -H
// 'K: V', -d BODY (a POST), -o /dev/null, -w '%{http_code} ', and a pipe
// into grep -i PATTERN (with \| for "or"). With -i the status line comes
// first, then the header fields, sorted as Go's server writes them.
func (sh *transcript) curl(cmd string) string {
	t := sh.t
	c, pattern, piped := strings.Cut(cmd, " | grep -i ")
	var re *regexp.Regexp
	if piped {
		re = regexp.MustCompile("(?i)" + strings.ReplaceAll(strings.Trim(pattern, `'"`), `\|`, "|"))
	}
	args := words(t, c)
	req, _ := http.NewRequest(http.MethodGet, "", nil)
	include, discard, format := false, false, ""
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-s":
		case a == "-si", a == "-i":
			include = true
		case a == "-H":
			i++
			k, v, _ := strings.Cut(args[i], ":")
			req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		case a == "-d":
			i++
			req.Method = http.MethodPost
			req.Body = io.NopCloser(strings.NewReader(args[i]))
			req.ContentLength = int64(len(args[i]))
			if req.Header.Get("Content-Type") == "" {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // as curl does
			}
		case a == "-o":
			i++
			discard = args[i] == "/dev/null"
		case a == "-w":
			i++
			format = args[i]
		case strings.HasPrefix(a, "-"):
			t.Fatalf("%s: the test's curl knows no %s", cmd, a)
		default:
			u := strings.Replace(a, "localhost:8080", strings.TrimPrefix(sh.serve, "http://"), 1)
			if !strings.HasPrefix(u, "http") {
				u = "http://" + u
			}
			var err error
			if req.URL, err = req.URL.Parse(u); err != nil {
				t.Fatal(err)
			}
			req.Host = req.URL.Host
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var lines []string
	if include {
		lines = append(lines, resp.Proto+" "+resp.Status)
		names := make([]string, 0, len(resp.Header))
		for k := range resp.Header {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			for _, v := range resp.Header[k] {
				lines = append(lines, k+": "+v)
			}
		}
		lines = append(lines, "")
	}
	var out strings.Builder
	for _, l := range lines {
		out.WriteString(l + "\n")
	}
	if !discard {
		out.Write(body)
	}
	if format != "" {
		out.WriteString(strings.ReplaceAll(format, "%{http_code}", strconv.Itoa(resp.StatusCode)))
	}
	if !piped {
		return out.String()
	}
	var kept strings.Builder
	for _, l := range strings.SplitAfter(out.String(), "\n") {
		if re.MatchString(strings.TrimSuffix(l, "\n")) {
			kept.WriteString(strings.TrimSuffix(l, "\n") + "\n")
		}
	}
	return kept.String()
}

// words splits a command line as the shell would: spaces, and quotes.
func words(t *testing.T, s string) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("unbalanced quotes in %q", s)
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// startServeOutput runs `edgelimit serve` in-process on a free port and
// returns its URL and what it printed on stdout up to its table's last
// line (policies OK); the server stops when the test ends.
func startServeOutput(t *testing.T, args ...string) (url, stdout string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append(args, "--addr", "127.0.0.1:0"), pw, stderr)
		pw.Close()
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var out strings.Builder
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited: %s%s", out.String(), stderr.String())
			}
			out.WriteString(l + "\n")
			if m := listenRe.FindStringSubmatch(l); m != nil {
				url = m[1]
			}
			if strings.HasSuffix(l, " OK") && url != "" {
				go func() { // keep reading what serve prints later
					for range lines {
					}
				}()
				return url, out.String()
			}
		case <-deadline:
			t.Fatalf("serve did not start: %s%s", out.String(), stderr.String())
		}
	}
}
