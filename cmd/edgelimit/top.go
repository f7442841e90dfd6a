package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/keyhash"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
)

// top: who is being limited, from the decision lines package metrics
// writes (EMF), locally: the lines of `edgelimit serve --emf`, a function's
// output under the runtime emulator, or CloudWatch Logs events exported as
// text. It is the local twin of template.yaml's Contributor Insights rule,
// which ranks the same lines by Policy and KeyHash in CloudWatch.

const topUsage = `usage: edgelimit top [flags] [FILE...]

Prints, for each policy, the client keys with the most denials in the decision
lines (CloudWatch EMF) of FILEs, or of standard input without one: the output of
'edgelimit serve --emf', a function's output, or CloudWatch Logs events. Keys
are shown as the functions hash them (the KeyHash of each line, the hash a
store keeps), never raw: --key looks up a key you know, hashed with
EDGELIMIT_HASH_KEY. Other lines are skipped. Flags may come before or after
the files.
`

type topFlags struct {
	n        int
	policy   string
	key      string
	policies string
	json     bool
}

func runTop(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var f topFlags
	c := newCmdline("top", topUsage)
	fs := c.fs
	fs.IntVar(&f.n, "n", 10, "keys to print per policy")
	fs.StringVar(&f.policy, "policy", "", "only this policy")
	fs.StringVar(&f.key, "key", "", "only this client key (an API key, an address, a claim's value), hashed with EDGELIMIT_HASH_KEY for each policy of the policy file as the functions and serve hash it")
	fs.StringVar(&f.policies, "policies", os.Getenv(setup.EnvPolicyFile), "with --key: the policy file (default: EDGELIMIT_POLICY_FILE, else the embedded example policies.yaml)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	files, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if f.n < 1 {
		return c.usageError(stderr, "-n %d: want at least 1", f.n)
	}
	if c.set("policies") && f.key == "" {
		return c.usageError(stderr, "--policies is for --key: the lines name their policies")
	}
	var want map[string][]string // policy -> the hashes --key has under it
	if f.key != "" {
		var err error
		if want, err = hashesOf(f.policies, f.key); err != nil {
			return c.fail(stderr, err)
		}
	}
	t := newTally()
	if len(files) == 0 {
		if err := t.read(stdin); err != nil {
			return c.fail(stderr, fmt.Errorf("standard input: %w", err))
		}
	}
	for _, name := range files {
		if ctx.Err() != nil {
			return c.fail(stderr, ctx.Err())
		}
		r, err := os.Open(name)
		if err != nil {
			return c.fail(stderr, err)
		}
		err = t.read(r)
		r.Close()
		if err != nil {
			return c.fail(stderr, fmt.Errorf("%s: %w", name, err))
		}
	}
	if t.decisions == 0 {
		return c.fail(stderr, errors.New("no decision lines in the input: give it the EMF lines of 'edgelimit serve --emf' or of the functions (metrics on)"))
	}
	rows := t.top(f.n, f.policy, want)
	if f.json {
		printTopJSON(stdout, rows, t)
		return exitOK
	}
	if len(rows) == 0 {
		what := "no decisions"
		if f.policy != "" {
			what += " of policy " + f.policy
		}
		if f.key != "" {
			what += " of that key"
		}
		fmt.Fprintf(stdout, "%s in %d decision lines\n", what, t.decisions)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tKEY HASH\tDENIED\tALLOWED\tSHADOW DENIED")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", r.Policy, r.KeyHash, r.Denied, r.Allowed, r.ShadowDenied)
	}
	tw.Flush()
	return exitOK
}

// decisionLine is what top reads of one EMF decision line.
type decisionLine struct {
	Policy, KeyHash               string
	Allowed, Denied, ShadowDenied bool
}

// parseDecisionLine reads one line: an EMF decision line of package
// metrics, from its first '{' (so that a prefix such as the timestamp and
// stream of an exported CloudWatch Logs event is skipped). ok is false for
// every other line: a log line, a breaker line, a line that is not JSON.
// Lines come from logs, which may carry what clients sent, so only a line
// whose Policy is a policy name and whose KeyHash is a hashed key (or
// absent) counts: a raw key someone wrote into a log cannot be printed.
func parseDecisionLine(line []byte) (d decisionLine, ok bool) {
	i := bytes.IndexByte(line, '{')
	if i < 0 || !bytes.Contains(line[i:], []byte(`"_aws"`)) {
		return d, false
	}
	var raw struct {
		AWS *struct {
			CloudWatchMetrics []json.RawMessage
		} `json:"_aws"`
		Policy       *string  `json:"Policy"`
		KeyHash      *string  `json:"KeyHash"`
		Allowed      *float64 `json:"Allowed"`
		Denied       *float64 `json:"Denied"`
		ShadowDenied *float64 `json:"ShadowDenied"`
	}
	if json.NewDecoder(bytes.NewReader(line[i:])).Decode(&raw) != nil {
		return d, false
	}
	if raw.AWS == nil || len(raw.AWS.CloudWatchMetrics) == 0 || raw.Policy == nil || raw.Allowed == nil || raw.Denied == nil ||
		!isPolicyName(*raw.Policy) {
		return d, false
	}
	d.Policy = *raw.Policy
	if raw.KeyHash != nil {
		if !isKeyHash(*raw.KeyHash) {
			return decisionLine{}, false
		}
		d.KeyHash = *raw.KeyHash
	}
	d.Allowed, d.Denied = *raw.Allowed == 1, *raw.Denied == 1
	d.ShadowDenied = raw.ShadowDenied != nil && *raw.ShadowDenied == 1
	return d, true
}

// isPolicyName reports a policy (or list) name as the policy file allows
// them: 1-64 characters of a-z, 0-9 and -.
func isPolicyName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isKeyHash reports a hashed key: keyhash.Length characters of base64url.
func isKeyHash(s string) bool {
	if len(s) != keyhash.Length {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// topRow is one key of one policy and its counts.
type topRow struct {
	Policy       string `json:"policy"`
	KeyHash      string `json:"key_hash"`
	Denied       int64  `json:"denied"`
	Allowed      int64  `json:"allowed"`
	ShadowDenied int64  `json:"shadow_denied"`
}

type tally struct {
	rows map[[2]string]*topRow
	// decisions counts the decision lines read, keyless counts those
	// without a key (a list's decision), which no key's row counts.
	decisions, keyless int64
}

func newTally() *tally { return &tally{rows: map[[2]string]*topRow{}} }

// maxLine bounds a line; a longer one is skipped whole (no EMF decision
// line is near it).
const maxLine = 256 << 10

func (t *tally) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if d, ok := parseDecisionLine(line); ok {
			t.add(d)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readLine returns the next line without its newline, or nil for a line
// longer than maxLine, which it skips.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	long := false
	for {
		part, err := br.ReadSlice('\n')
		if !long {
			if len(line)+len(part) > maxLine {
				long, line = true, nil
			} else {
				line = append(line, part...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if long {
			return nil, err
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

func (t *tally) add(d decisionLine) {
	t.decisions++
	if d.KeyHash == "" {
		t.keyless++
		return
	}
	k := [2]string{d.Policy, d.KeyHash}
	r := t.rows[k]
	if r == nil {
		r = &topRow{Policy: d.Policy, KeyHash: d.KeyHash}
		t.rows[k] = r
	}
	if d.Denied {
		r.Denied++
	}
	if d.Allowed {
		r.Allowed++
	}
	if d.ShadowDenied {
		r.ShadowDenied++
	}
}

// top returns the n keys of each policy (only pol's, if set; only the
// hashes of want, if set) with the most denials, then shadow denials, then
// admissions; policies in name order.
func (t *tally) top(n int, pol string, want map[string][]string) []topRow {
	by := map[string][]topRow{}
	for _, r := range t.rows {
		if pol != "" && r.Policy != pol || want != nil && !slices.Contains(want[r.Policy], r.KeyHash) {
			continue
		}
		by[r.Policy] = append(by[r.Policy], *r)
	}
	names := make([]string, 0, len(by))
	for p := range by {
		names = append(names, p)
	}
	slices.Sort(names)
	var out []topRow
	for _, p := range names {
		rs := by[p]
		slices.SortFunc(rs, func(a, b topRow) int {
			switch {
			case a.Denied != b.Denied:
				return cmpDesc(a.Denied, b.Denied)
			case a.ShadowDenied != b.ShadowDenied:
				return cmpDesc(a.ShadowDenied, b.ShadowDenied)
			case a.Allowed != b.Allowed:
				return cmpDesc(a.Allowed, b.Allowed)
			}
			return strings.Compare(a.KeyHash, b.KeyHash)
		})
		out = append(out, rs[:min(n, len(rs))]...)
	}
	return out
}

func cmpDesc(a, b int64) int {
	if a > b {
		return -1
	}
	return 1
}

func printTopJSON(w io.Writer, rows []topRow, t *tally) {
	if rows == nil {
		rows = []topRow{}
	}
	b, _ := json.Marshal(map[string]any{"decisions": t.decisions, "without_key": t.keyless, "keys": rows})
	fmt.Fprintf(w, "%s\n", b)
}

// hashesOf hashes raw as the engine does under each policy of the policy
// file at path: both hashes the engine may use (HMAC-SHA256, and the
// in-process SipHash of a policy whose state never leaves the process, as
// `edgelimit serve --store memory` has), so that --key finds a key in the
// lines of the functions and of serve alike. It needs EDGELIMIT_HASH_KEY,
// the hash key the lines were written with.
func hashesOf(path, raw string) (map[string][]string, error) {
	s := os.Getenv(setup.EnvHashKey)
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("--key needs %s: the hash key of the functions (the hash_key of their secret) or of serve", setup.EnvHashKey)
	}
	secret, err := setup.HashKey(s)
	if err != nil {
		return nil, err
	}
	pf, err := loadPolicyFile(path)
	if err != nil {
		return nil, err
	}
	// Only the keys matter: a copy of each policy without what would need
	// a real limiter or store (work after the response, overrides, the
	// in-process twin, lists).
	lean := &policy.File{Source: pf.Source, Version: pf.Version}
	for _, p := range pf.Policies {
		if p.Key.Kind() == policy.KeyGlobal {
			continue // one key for every client: not a client's
		}
		q := *p
		q.ChargeAfter, q.ChargeStatus, q.RefundStatus, q.Overrides = false, nil, nil, false
		if q.OnStoreError == policy.FailLocal {
			q.OnStoreError = policy.FailClosed
		}
		lean.Policies = append(lean.Policies, &q)
	}
	out := map[string][]string{}
	for _, inProcess := range []bool{false, true} {
		e, err := edgelimit.New(edgelimit.Config{Policies: lean, HashSecret: secret,
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			Limiters: func(*policy.Policy) (edgelimit.Limiter, error) { return hashOnly{inProcess}, nil }})
		if err != nil {
			return nil, err
		}
		for _, p := range lean.Policies {
			h, err := e.KeyOf(p.Name, raw)
			if err != nil {
				continue // not a key of this policy (an address for an ip policy)
			}
			out[p.Name] = append(out[p.Name], h)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the --key given is not a client key of any policy of %s (an ip policy's key is an address)", pf.Source)
	}
	return out, nil
}

// hashOnly is a limiter that is never asked: it only tells the engine which
// hash a policy's keys get (InProcess).
type hashOnly struct{ inProcess bool }

func (hashOnly) Allow(context.Context, edgelimit.Request) (edgelimit.Decision, error) {
	return edgelimit.Decision{}, errors.New("edgelimit top: not a limiter")
}

func (h hashOnly) InProcess() bool { return h.inProcess }
