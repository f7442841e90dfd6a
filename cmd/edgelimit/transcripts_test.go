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

var updateREADME = flag.Bool("update-readme", false, "write the outputs TestREADMEQuotas saw into README.md")

// TestREADMEQuotas runs the README's "Quotas you can run a business on":
// it writes the section's quotas.yaml, runs every command of its console
// blocks (edgelimit in-process, curl emulated, against `edgelimit serve
// --store dynamodb` on the runner's server) and compares what each prints
// with what the README shows. What depends on the time of day (t=, a
// usage's RESET, a grant's end) and the port are compared as their shape.
//
//	go run ./internal/tools/testservers -only dynalite -- go test -count=1 -run TestREADMEQuotas ./cmd/edgelimit/ -update-readme
//
// writes the outputs of a run into the README.
//
// Two things differ from a reader's run, both for the shared test servers:
// the policies get store_timeout: 5s (a call the 100 ms default cancels
// mid-request can crash dynalite), and serve listens on a free port.
func TestREADMEQuotas(t *testing.T) {
	quotaEnv(t)
	path := filepath.Join(testDir, "..", "..", "README.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	const title = "\n## Quotas you can run a business on\n"
	start := strings.Index(readme, title)
	if start < 0 {
		t.Fatalf("README.md has no section %q", strings.TrimSpace(title))
	}
	end := start + len(title) + strings.Index(readme[start+len(title):], "\n## ")
	section := readme[start:end]
	blocks := fencedBlocks(section)
	if len(blocks) == 0 || blocks[0].lang != "yaml" || !strings.HasPrefix(blocks[0].body, "# quotas.yaml\n") {
		t.Fatal("the section's first block must be ```yaml starting with # quotas.yaml")
	}
	dir := t.TempDir()
	policy := strings.ReplaceAll(blocks[0].body, "    strategy: durable\n", "    strategy: durable\n    store_timeout: 5s\n")
	if err := os.WriteFile(filepath.Join(dir, "quotas.yaml"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	awayFromDayBoundary(t)

	sh := &transcript{t: t}
	updated := section
	for _, b := range blocks[1:] {
		if b.lang != "console" {
			continue
		}
		var out strings.Builder
		for _, s := range parseTranscript(b.body) {
			got := sh.run(s.cmd)
			if normalize(got) != normalize(s.want) {
				t.Errorf("$ %s\nprinted:\n%s\nthe README shows:\n%s", s.cmd, got, s.want)
			}
			// The reader's serve listens on its default address.
			fmt.Fprintf(&out, "$ %s\n%s", s.cmd, portRe.ReplaceAllString(got, "http://127.0.0.1:8080"))
		}
		updated = strings.Replace(updated, "```console\n"+b.body+"```", "```console\n"+out.String()+"```", 1)
	}
	if *updateREADME && updated != section {
		if err := os.WriteFile(path, []byte(readme[:start]+updated+readme[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("README.md updated")
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
	portRe    = regexp.MustCompile(`http://127\.0\.0\.1:\d+`)
	spaceRe   = regexp.MustCompile(`[ \t]+`)
)

// normalize keeps what a run's output must show and drops what depends on
// when it ran: the effective window t, a usage table's RESET, a JSON
// reset_seconds, a grant's end, serve's port, and column padding.
func normalize(s string) string {
	var out []string
	table := false
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		line = tRe.ReplaceAllString(line, "t=T")
		line = secondsRe.ReplaceAllString(line, `"reset_seconds":N`)
		line = untilRe.ReplaceAllString(line, "until TIME")
		line = portRe.ReplaceAllString(line, "http://127.0.0.1:PORT")
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
	case strings.HasPrefix(cmd, "npx dynalite"):
		return "" // the runner started it
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
		// the README tells the reader to do.
		time.Sleep(time.Duration(n) * time.Second)
		return ""
	case strings.HasPrefix(cmd, "for i in "):
		var n int
		var body string
		if _, err := fmt.Sscanf(cmd, "for i in 1 2 %d;", &n); err != nil {
			t.Fatalf("%s: want `for i in 1 2 ... N; do CMD; done`", cmd)
		}
		_, body, _ = strings.Cut(cmd, "; do ")
		body = strings.TrimSuffix(body, "; done")
		var out strings.Builder
		for range n {
			out.WriteString(sh.run(body))
		}
		return out.String()
	case strings.HasPrefix(cmd, "curl "):
		return sh.curl(cmd)
	case strings.HasPrefix(cmd, "edgelimit serve"):
		args := words(t, strings.TrimSuffix(strings.TrimPrefix(cmd, "edgelimit "), " &"))
		var out string
		sh.serve, out = startServeOutput(t, args...)
		return out
	case strings.HasPrefix(cmd, "edgelimit "):
		var out syncBuffer
		run(context.Background(), words(t, strings.TrimPrefix(cmd, "edgelimit ")), &out, &out)
		return out.String()
	}
	t.Fatalf("the README's transcript has a command the test cannot run: %s", cmd)
	return ""
}

// curl emulates `curl -si -H 'K: V'... URL | grep -i PATTERN`: the
// response's header fields, sorted as Go's server writes them, that match.
func (sh *transcript) curl(cmd string) string {
	t := sh.t
	c, pattern, ok := strings.Cut(cmd, " | grep -i ")
	if !ok {
		t.Fatalf("%s: want `curl -si ... | grep -i PATTERN`", cmd)
	}
	re := regexp.MustCompile("(?i)" + strings.Trim(pattern, `'"`))
	args := words(t, c)
	req, _ := http.NewRequest(http.MethodGet, "", nil)
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-si":
		case a == "-H":
			i++
			k, v, _ := strings.Cut(args[i], ":")
			req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
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
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	names := make([]string, 0, len(resp.Header))
	for k := range resp.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	var out strings.Builder
	for _, k := range names {
		for _, v := range resp.Header[k] {
			if line := k + ": " + v; re.MatchString(line) {
				out.WriteString(line + "\n")
			}
		}
	}
	return out.String()
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
