package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/dynamodb/kv"
)

// The operator's commands: a client key's usage read back, reset and
// granted, and its override set, in the deployed table (or a local
// server's). The key is the raw client key (an API key, an address, a
// claim's value); it is hashed with EDGELIMIT_HASH_KEY exactly as the
// functions hash it, and never printed.

const quotaUsage = `Usage:
  edgelimit usage    [flags] POLICY KEY            the key's quota, what is left and when it resets
  edgelimit reset    [flags] POLICY KEY            forget the key's usage (a new billing cycle)
  edgelimit grant    [flags] POLICY KEY UNITS      give the key UNITS beyond its quota
  edgelimit override [flags] set POLICY KEY        set the key's own limit (--limit, --window, --burst)
  edgelimit override [flags] get POLICY KEY        print the key's override
  edgelimit override [flags] delete POLICY KEY     remove it

KEY is the client key as requests carry it; EDGELIMIT_HASH_KEY (the functions'
hash key) must be set.
`

type opFlags struct {
	policies, table, endpoint, tier string
	json                            bool
	limit, burst                    int64
	window, forDur                  time.Duration
	until                           string
}

func opFlagSet(name string, f *opFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, quotaUsage+"\nFlags:\n"); fs.PrintDefaults() }
	table := os.Getenv(setup.EnvTable)
	if table == "" {
		table = "edgelimit"
	}
	fs.StringVar(&f.policies, "policies", os.Getenv(setup.EnvPolicyFile), "policy file (default: EDGELIMIT_POLICY_FILE, as the functions read it, else the embedded example policies.yaml)")
	fs.StringVar(&f.table, "table", table, "DynamoDB table (default: EDGELIMIT_TABLE, else edgelimit)")
	fs.StringVar(&f.endpoint, "dynamodb-endpoint", os.Getenv(setup.EnvEndpoint), "DynamoDB endpoint URL of a local server (default: EDGELIMIT_DYNAMODB_ENDPOINT, else AWS)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	switch name {
	case "usage":
		fs.StringVar(&f.tier, "tier", "", "the tier to read the quota of, for a policy with tiers (default: its default tier)")
	case "grant", "override":
		fs.DurationVar(&f.forDur, "for", 0, "how long it lasts, like 24h (default: grant: the current window; override: until removed)")
		fs.StringVar(&f.until, "until", "", "when it ends, RFC 3339 (instead of --for)")
	}
	if name == "override" {
		fs.Int64Var(&f.limit, "limit", 0, "set: the key's limit")
		fs.DurationVar(&f.window, "window", 0, "set: the key's window, like 1h")
		fs.Int64Var(&f.burst, "burst", 0, "set: the key's burst (gcra, kv)")
	}
	return fs
}

// runQuota runs usage, reset, grant and override.
func runQuota(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	var f opFlags
	fs := opFlagSet(cmd, &f, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	// Flags may come anywhere: before POLICY, between the arguments, after
	// them (grant POLICY KEY 50 --for 24h).
	var rest []string
	for args := fs.Args(); len(args) > 0; args = fs.Args() {
		rest = append(rest, args[0])
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
	}
	action := ""
	if cmd == "override" {
		if len(rest) == 0 || !strings.Contains(" set get delete ", " "+rest[0]+" ") {
			fmt.Fprintf(stderr, "edgelimit override: say set, get or delete\n\n%s", quotaUsage)
			return 2
		}
		action, rest = rest[0], rest[1:]
	}
	want := 2
	if cmd == "grant" {
		want = 3
	}
	if len(rest) != want {
		fmt.Fprintf(stderr, "edgelimit %s: want %d arguments, got %d\n\n%s", cmd, want, len(rest), quotaUsage)
		return 2
	}
	pol, key := rest[0], rest[1]
	fail := func(err error) int {
		fmt.Fprintf(stderr, "edgelimit %s: %s\n", cmd, strings.TrimPrefix(err.Error(), "edgelimit: "))
		return 1
	}
	until, err := untilOf(f)
	if err != nil {
		return fail(err)
	}
	e, err := operatorEngine(ctx, f, pol)
	if err != nil {
		return fail(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch {
	case cmd == "usage":
		d, err := e.Usage(cctx, pol, key, f.tier)
		if err != nil {
			return fail(err)
		}
		l, has, err := e.Override(cctx, pol, key)
		if err != nil && !isNoOverrides(err) {
			return fail(err)
		}
		printUsage(stdout, f, e, pol, d, l, has)
	case cmd == "reset":
		if err := e.Reset(cctx, pol, key); err != nil {
			return fail(err)
		}
		report(stdout, f, map[string]any{"policy": pol, "reset": true}, "policy %s: the key's usage is reset\n", pol)
	case cmd == "grant":
		units, err := strconv.ParseInt(rest[2], 10, 64)
		if err != nil || units < 1 {
			return fail(fmt.Errorf("UNITS %q is not a whole number of at least 1", rest[2]))
		}
		if err := e.Grant(cctx, pol, key, units, until); err != nil {
			return fail(err)
		}
		when := "for the current window"
		if !until.IsZero() {
			when = "until " + until.UTC().Format(time.RFC3339)
		}
		report(stdout, f, map[string]any{"policy": pol, "granted": units, "until": jsonTime(until)},
			"policy %s: granted %d units %s\n", pol, units, when)
	case action == "set":
		l := policy.Limits{Limit: f.limit, Window: f.window, Burst: f.burst}
		if err := e.SetOverride(cctx, pol, key, l, until); err != nil {
			return fail(err)
		}
		when := "until removed"
		if !until.IsZero() {
			when = "until " + until.UTC().Format(time.RFC3339)
		}
		report(stdout, f, map[string]any{"policy": pol, "override": limitsJSON(l), "until": jsonTime(until)},
			"policy %s: override %s set %s; every instance applies it within the policy's override_staleness (%s)\n",
			pol, describeLimits(l), when, formatDuration(staleness(e, pol)))
	case action == "get":
		l, ok, err := e.Override(cctx, pol, key)
		if err != nil {
			return fail(err)
		}
		if !ok {
			report(stdout, f, map[string]any{"policy": pol, "override": nil}, "policy %s: no override for this key\n", pol)
			break
		}
		report(stdout, f, map[string]any{"policy": pol, "override": limitsJSON(l)}, "policy %s: override %s\n", pol, describeLimits(l))
	case action == "delete":
		if err := e.DeleteOverride(cctx, pol, key); err != nil {
			return fail(err)
		}
		report(stdout, f, map[string]any{"policy": pol, "override": nil}, "policy %s: override removed; the policy's limits apply again within %s\n",
			pol, formatDuration(staleness(e, pol)))
	}
	return 0
}

func untilOf(f opFlags) (time.Time, error) {
	switch {
	case f.until != "" && f.forDur != 0:
		return time.Time{}, errors.New("give --until or --for, not both")
	case f.until != "":
		t, err := time.Parse(time.RFC3339, f.until)
		if err != nil {
			return time.Time{}, fmt.Errorf("--until %q is not an RFC 3339 time, like 2026-12-31T23:59:59Z", f.until)
		}
		return t, nil
	case f.forDur < 0:
		return time.Time{}, fmt.Errorf("--for %s is negative", f.forDur)
	case f.forDur > 0:
		return time.Now().Add(f.forDur), nil
	}
	return time.Time{}, nil
}

// operatorEngine builds an engine of the one named policy on the table, so
// that a policy file with signed policies needs no key ring here.
func operatorEngine(ctx context.Context, f opFlags, pol string) (*edgelimit.Engine, error) {
	pf, err := loadPolicyFile(f.policies)
	if err != nil {
		return nil, err
	}
	var p *policy.Policy
	var names []string
	for _, q := range pf.Policies {
		names = append(names, q.Name)
		if q.Name == pol {
			p = q
		}
	}
	if p == nil {
		return nil, fmt.Errorf("%s has no policy %q (it has %s)", pf.Source, pol, strings.Join(names, ", "))
	}
	if p.Strategy != durablecounter.Strategy && p.Strategy != kvbucket.Strategy {
		return nil, fmt.Errorf("policy %q is %s: it keeps no count on the server (the client carries its window token), so there is no usage to read, reset or grant, and no override to set", p.Name, p.StrategyName())
	}
	s := os.Getenv(setup.EnvHashKey)
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%s is not set: it must be the functions' hash key (the hash_key of their secret), or the key cannot be found", setup.EnvHashKey)
	}
	secret, err := setup.HashKey(s)
	if err != nil {
		return nil, err
	}
	client, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: f.endpoint})
	if err != nil {
		return nil, err
	}
	one := &policy.File{Source: pf.Source, Version: pf.Version, LegacyHeaders: pf.LegacyHeaders, Policies: []*policy.Policy{p}}
	cfg := dynamodb.Config{Client: client, Table: f.table}
	backends := []setup.Backend{durable.Backend(cfg), kv.Backend(cfg)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	benv := setup.BackendEnv{Getenv: os.Getenv, Logger: log}
	factory, err := setup.Limiters(one, backends, benv)
	if err != nil {
		return nil, err
	}
	// Overrides are read and written whether or not the policy applies
	// them, so that `usage` can say one is set but ignored.
	ovr, err := cfg.Overrides(&benv)
	if err != nil {
		return nil, err
	}
	return edgelimit.New(edgelimit.Config{Policies: one, Limiters: factory, HashSecret: secret, Logger: log, Overrides: ovr})
}

func loadPolicyFile(path string) (*policy.File, error) {
	if path == "" {
		return policy.Parse("policies.yaml (embedded)", examplePolicies)
	}
	return policy.Load(path)
}

func isNoOverrides(err error) bool { return strings.Contains(err.Error(), "does not read overrides") }

func staleness(e *edgelimit.Engine, pol string) time.Duration {
	for _, p := range e.Policies().Policies {
		if p.Name == pol {
			return p.OverrideStaleness
		}
	}
	return 0
}

func printUsage(w io.Writer, f opFlags, e *edgelimit.Engine, pol string, d edgelimit.Decision, ovr policy.Limits, hasOverride bool) {
	tier := f.tier
	if p := e.Policies().Policies[0]; p.Tiers != nil && tier == "" {
		tier = p.Tiers.Default
	}
	if f.json {
		// Whole seconds, rounded up, as the RateLimit headers say them.
		out := map[string]any{"policy": pol, "limit": d.Limit, "window_seconds": wholeSeconds(d.Window), "remaining": d.Remaining,
			"reset_seconds": wholeSeconds(d.Reset), "allowed": d.Allowed}
		if tier != "" {
			out["tier"] = tier
		}
		if hasOverride {
			out["override"] = limitsJSON(ovr)
		}
		writeJSON(w, out)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tTIER\tLIMIT\tWINDOW\tREMAINING\tRESET\tOVERRIDE")
	o := "-"
	if hasOverride {
		o = describeLimits(ovr)
	}
	t := tier
	if t == "" {
		t = "-"
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", pol, t, d.Limit, formatDuration(d.Window), d.Remaining, formatDuration(d.Reset.Round(time.Second)), o)
	tw.Flush()
}

func report(w io.Writer, f opFlags, j map[string]any, format string, args ...any) {
	if f.json {
		writeJSON(w, j)
		return
	}
	fmt.Fprintf(w, format, args...)
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v) // maps of plain values: cannot fail
	fmt.Fprintf(w, "%s\n", b)
}

func jsonTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339)
}

func limitsJSON(l policy.Limits) map[string]any {
	m := map[string]any{}
	if l.Limit > 0 {
		m["limit"] = l.Limit
	}
	if l.Window > 0 {
		m["window_seconds"] = wholeSeconds(l.Window)
	}
	if l.Burst > 0 {
		m["burst"] = l.Burst
	}
	return m
}

func describeLimits(l policy.Limits) string {
	var parts []string
	if l.Limit > 0 {
		parts = append(parts, "limit "+strconv.FormatInt(l.Limit, 10))
	}
	if l.Window > 0 {
		parts = append(parts, "window "+formatDuration(l.Window))
	}
	if l.Burst > 0 {
		parts = append(parts, "burst "+strconv.FormatInt(l.Burst, 10))
	}
	return strings.Join(parts, ", ")
}

// wholeSeconds is d in whole seconds, rounded up, as the RateLimit headers
// say it.
func wholeSeconds(d time.Duration) int64 { return int64((max(d, 0) + time.Second - 1) / time.Second) }
