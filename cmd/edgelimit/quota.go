package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/durablecounter"
	inflightlimiter "github.com/edgelimit/edgelimit/inflight"
	"github.com/edgelimit/edgelimit/internal/ddb"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/dynamodb/inflight"
	"github.com/edgelimit/edgelimit/setup/dynamodb/kv"
	"github.com/edgelimit/edgelimit/signedwindow"
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
  edgelimit override set [flags] POLICY KEY        set the key's own limit (--limit, --window, --burst;
                                                   --limit 0 blocks the key: every request is a 429)
  edgelimit override get [flags] POLICY KEY        print the key's override
  edgelimit override delete [flags] POLICY KEY     remove it: the policy's limits apply again

KEY is the client key as requests carry it (an API key, an address, a claim's
value); EDGELIMIT_HASH_KEY (the functions' hash key) must be set. Flags may
come before, between or after the arguments.
`

// callTimeout bounds an operator's command, whatever the store does.
const callTimeout = 30 * time.Second

type opFlags struct {
	policies, table, endpoint, tier string
	json                            bool
	limit, burst                    int64
	window, forDur                  time.Duration
	until                           string
}

func opCmdline(name string, f *opFlags) *cmdline {
	c := newCmdline(name, quotaUsage)
	fs := c.fs
	fs.StringVar(&f.policies, "policies", os.Getenv(setup.EnvPolicyFile), "policy file (default: EDGELIMIT_POLICY_FILE, as the functions read it, else the embedded example policies.yaml)")
	fs.StringVar(&f.table, "table", defaultTable(), "DynamoDB table (EDGELIMIT_TABLE sets the default)")
	fs.StringVar(&f.endpoint, "dynamodb-endpoint", os.Getenv(setup.EnvEndpoint), "DynamoDB endpoint URL of a local server (default: EDGELIMIT_DYNAMODB_ENDPOINT, else AWS)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	switch name {
	case "usage":
		fs.StringVar(&f.tier, "tier", "", "the tier to read the quota of, for a policy with tiers (default: its default tier)")
	case "grant", "override":
		fs.DurationVar(&f.forDur, "for", 0, "how long it lasts, like 24h (default: grant: until the current window ends; override: until removed)")
		fs.StringVar(&f.until, "until", "", "when it ends, RFC 3339 (instead of --for)")
	}
	if name == "override" {
		fs.Int64Var(&f.limit, "limit", 0, "set: the key's limit; 0 blocks the key")
		fs.DurationVar(&f.window, "window", 0, "set: the key's window, like 1h")
		fs.Int64Var(&f.burst, "burst", 0, "set: the key's burst (gcra, kv)")
	}
	return c
}

// runQuota runs usage, reset, grant and override.
func runQuota(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	var f opFlags
	c := opCmdline(cmd, &f)
	if _, pos := c.split(args); cmd == "override" && len(pos) > 0 && slices.Contains([]string{"set", "get", "delete"}, pos[0]) {
		c.name = "override " + pos[0] // for messages
	}
	rest, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	action := ""
	if cmd == "override" {
		if len(rest) == 0 || !slices.Contains([]string{"set", "get", "delete"}, rest[0]) {
			return c.usageError(stderr, "say set, get or delete")
		}
		action, rest = rest[0], rest[1:]
	}
	want := 2
	if cmd == "grant" {
		want = 3
	}
	if len(rest) != want {
		return c.usageError(stderr, "want %d arguments, got %d", want, len(rest))
	}
	pol, key := rest[0], rest[1]
	var units int64
	if cmd == "grant" {
		n, err := strconv.ParseInt(rest[2], 10, 64)
		if err != nil || n < 1 {
			return c.usageError(stderr, "UNITS %q is not a whole number of at least 1", rest[2])
		}
		units = n
	}
	until, err := untilOf(f)
	if err != nil {
		return c.usageError(stderr, "%v", err)
	}
	var l policy.Limits
	switch action {
	case "set":
		if !c.set("limit") && !c.set("window") && !c.set("burst") {
			return c.usageError(stderr, "say what to set: --limit, --window or --burst (--limit 0 blocks the key); `edgelimit override delete` removes an override")
		}
		switch {
		case f.limit < 0:
			return c.usageError(stderr, "--limit %d is negative", f.limit)
		case c.set("burst") && f.burst < 1:
			return c.usageError(stderr, "--burst %d must be at least 1", f.burst)
		case c.set("window") && (f.window < time.Millisecond || f.window%time.Millisecond != 0):
			return c.usageError(stderr, "--window %s must be a whole number of milliseconds, at least 1ms", f.window)
		case c.set("limit") && f.limit == 0 && c.set("burst"):
			return c.usageError(stderr, "--limit 0 blocks the key; a burst means nothing then")
		}
		l = policy.Limits{Limit: f.limit, Window: f.window, Burst: f.burst, Block: c.set("limit") && f.limit == 0}
	case "get", "delete":
		for _, name := range []string{"limit", "window", "burst", "for", "until"} {
			if c.set(name) {
				return c.usageError(stderr, "--%s is for override set", name)
			}
		}
	}

	e, p, at, err := operatorEngine(ctx, f, pol, cmd)
	if err != nil {
		return c.fail(stderr, err)
	}
	fail := func(err error) int { return c.fail(stderr, dynamoError(err, at, tableFix)) }
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	switch {
	case cmd == "usage":
		d, err := e.Usage(cctx, pol, key, f.tier)
		if err != nil {
			return fail(err)
		}
		var ovr policy.Limits
		has := false
		if p.Overrides {
			if ovr, has, err = e.Override(cctx, pol, key); err != nil {
				return fail(err)
			}
		}
		printUsage(stdout, f, p, d, ovr, has)
	case cmd == "reset":
		if err := e.Reset(cctx, pol, key); err != nil {
			return fail(err)
		}
		report(stdout, f, map[string]any{"policy": pol, "reset": true}, "policy %s: the key's usage is reset\n", pol)
	case cmd == "grant":
		if p.StrategyName() == "durable" && !p.Overrides {
			return c.fail(stderr, fmt.Errorf("policy %q takes no grants; add `overrides: true` to it (a policy an operator manages at run time)", pol))
		}
		how := ""
		if until.IsZero() {
			// The end of the current window, said and stored as an instant.
			if until, err = windowEnd(cctx, e, p, key, time.Now()); err != nil {
				return fail(err)
			}
			how = " (the end of the current window)"
		}
		if err := e.Grant(cctx, pol, key, units, until); err != nil {
			return fail(err)
		}
		report(stdout, f, map[string]any{"policy": pol, "granted": units, "until": until.UTC().Format(time.RFC3339)},
			"policy %s: granted %d units until %s%s\n", pol, units, until.UTC().Format(time.RFC3339), how)
	case action == "set":
		if err := e.SetOverride(cctx, pol, key, l, until); err != nil {
			return fail(err)
		}
		when := "until removed"
		if !until.IsZero() {
			when = "until " + until.UTC().Format(time.RFC3339)
		}
		report(stdout, f, map[string]any{"policy": pol, "override": limitsJSON(l), "until": jsonTime(until)},
			"policy %s: override %s set %s; every instance applies it within the policy's override_staleness (%s)\n",
			pol, describeLimits(l), when, policy.FormatDuration(p.OverrideStaleness))
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
			pol, policy.FormatDuration(p.OverrideStaleness))
	}
	return exitOK
}

// tableFix is what an operator whose table is not found should check.
const tableFix = "check --table (default " + setup.EnvTable + "): it must be the functions' table, the stack's TableName"

func untilOf(f opFlags) (time.Time, error) {
	switch {
	case f.until != "" && f.forDur != 0:
		return time.Time{}, errors.New("give --until or --for, not both")
	case f.until != "":
		t, err := time.Parse(time.RFC3339, f.until)
		if err != nil {
			return time.Time{}, fmt.Errorf("--until %q is not an RFC 3339 time, like 2026-12-31T23:59:59Z", f.until)
		}
		if !t.After(time.Now()) {
			return time.Time{}, fmt.Errorf("--until %s has passed", f.until)
		}
		return ceilSecond(t), nil
	case f.forDur < 0:
		return time.Time{}, fmt.Errorf("--for %s is negative", f.forDur)
	case f.forDur > 0:
		return ceilSecond(time.Now().Add(f.forDur)), nil
	}
	return time.Time{}, nil
}

// ceilSecond is t rounded up to a whole second: an end said in RFC 3339
// is the end stored.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// windowEnd is when the current window of the key's limits in force (its
// override's window, else its default tier's, else the policy's) ends: a
// fixed or sliding window's end on the epoch-aligned grid its counts live
// on, else one window from now. A grant without --for or --until lasts
// until then, and says so.
func windowEnd(ctx context.Context, e *edgelimit.Engine, p *policy.Policy, key string, now time.Time) (time.Time, error) {
	l := policy.Limits{Limit: p.Limit, Window: p.Window, Period: p.Period}
	if p.Tiers != nil {
		l = p.Tiers.Levels[p.Tiers.Default].Or(l)
	}
	if p.Overrides {
		o, ok, err := e.Override(ctx, p.Name, key)
		if err != nil {
			return time.Time{}, err
		}
		if ok {
			l = o.Or(l)
		}
	}
	if end, ok := periodEnd(l, now); ok {
		return end, nil
	}
	w := l.Window
	if o, ok := p.Options.(*durablecounter.Options); ok && (o.Algorithm == durablecounter.FixedWindow || o.Algorithm == durablecounter.SlidingWindow) {
		n := now.UnixNano()
		return time.Unix(0, (n/int64(w)+1)*int64(w)), nil
	}
	return now.Add(w), nil
}

// operatorEngine builds an engine of the one named policy on the table, so
// that a policy file with signed policies needs no key ring here. It
// returns the policy and where its table is, for messages.
func operatorEngine(ctx context.Context, f opFlags, pol, cmd string) (*edgelimit.Engine, *policy.Policy, storeAt, error) {
	at := storeAt{table: f.table, endpoint: f.endpoint}
	pf, err := loadPolicyFile(f.policies)
	if err != nil {
		return nil, nil, at, err
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
		return nil, nil, at, fmt.Errorf("%s has no policy %q (it has %s)", pf.Source, pol, strings.Join(names, ", "))
	}
	switch p.Strategy {
	case durablecounter.Strategy, kvbucket.Strategy:
	case inflightlimiter.Strategy:
		if cmd == "reset" || cmd == "grant" {
			return nil, nil, at, fmt.Errorf("policy %q is inflight: it counts the requests running now, which end by themselves, so there is nothing to %s (usage and override work)", p.Name, cmd)
		}
	case signedwindow.Strategy:
		return nil, nil, at, fmt.Errorf("policy %q is signed: it keeps no count on the server (the client carries its window token), so there is no usage to read, reset or grant, and no override to set", p.Name)
	default:
		return nil, nil, at, fmt.Errorf("policy %q is %s: the operator's commands work on durable, kv and inflight policies", p.Name, p.StrategyName())
	}
	s := os.Getenv(setup.EnvHashKey)
	if strings.TrimSpace(s) == "" {
		return nil, nil, at, fmt.Errorf("%s is not set: it must be the functions' hash key (the hash_key of their secret), or the key cannot be found", setup.EnvHashKey)
	}
	secret, err := setup.HashKey(s)
	if err != nil {
		return nil, nil, at, err
	}
	client, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: f.endpoint})
	if err != nil {
		return nil, nil, at, err
	}
	at.region = client.Options().Region
	one := &policy.File{Source: pf.Source, Version: pf.Version, LegacyHeaders: pf.LegacyHeaders, Policies: []*policy.Policy{p}}
	cfg := dynamodb.Config{Client: client, Table: f.table}
	backends := []setup.Backend{durable.Backend(cfg), kv.Backend(cfg), inflight.Backend(cfg)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	benv := setup.BackendEnv{Getenv: os.Getenv, Logger: log}
	factory, err := setup.Limiters(one, backends, benv)
	if err != nil {
		return nil, nil, at, err
	}
	// Overrides are read and written whether or not the policy applies
	// them, so that a command on a policy without overrides: true can say
	// so.
	ovr, err := cfg.Overrides(&benv)
	if err != nil {
		return nil, nil, at, err
	}
	bans, err := cfg.Bans(&benv)
	if err != nil {
		return nil, nil, at, err
	}
	e, err := edgelimit.New(edgelimit.Config{Policies: one, Limiters: factory, HashSecret: secret, Logger: log, Overrides: ovr, Bans: bans})
	return e, p, at, err
}

func loadPolicyFile(path string) (*policy.File, error) {
	if path == "" {
		return policy.Parse("policies.yaml (embedded)", examplePolicies)
	}
	return policy.Load(path)
}

// printUsage says the key's usage: REMAINING is what its next requests
// can spend (the quota's and the grant's units), GRANT the grant's units
// left and its end.
func printUsage(w io.Writer, f opFlags, p *policy.Policy, d edgelimit.Usage, ovr policy.Limits, hasOverride bool) {
	tier := f.tier
	if p.Tiers != nil && tier == "" {
		tier = p.Tiers.Default
	}
	if f.json {
		// Whole seconds, rounded up, as the RateLimit headers say them.
		out := map[string]any{"policy": p.Name, "limit": d.Limit, "window_seconds": wholeSeconds(d.Window), "remaining": d.Remaining,
			"quota_remaining": d.Quota, "reset_seconds": wholeSeconds(d.Reset), "allowed": d.Allowed, "grant": nil}
		if d.Grant.Units > 0 {
			out["grant"] = map[string]any{"units": d.Grant.Units, "until": jsonTime(d.Grant.Until)}
		}
		if end, ok := periodEnd(inForce(p, tier, ovr, hasOverride), usageNow()); ok {
			out["reset_at"] = end.Format(time.RFC3339)
		}
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
	fmt.Fprintln(tw, "POLICY\tTIER\tLIMIT\tWINDOW\tREMAINING\tRESET\tOVERRIDE\tGRANT")
	o := "-"
	if hasOverride {
		o = describeLimits(ovr)
	}
	t := tier
	if t == "" {
		t = "-"
	}
	reset := policy.FormatDuration(d.Reset.Round(time.Second))
	if end, ok := periodEnd(inForce(p, tier, ovr, hasOverride), usageNow()); ok {
		reset += " (at " + end.Format(time.RFC3339) + ")" // a calendar period's end
	}
	g := "-"
	if d.Grant.Units > 0 {
		g = fmt.Sprintf("%d until %s", d.Grant.Units, d.Grant.Until.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", p.Name, t, d.Limit, policy.FormatDuration(d.Window), d.Remaining, reset, o, g)
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
	if l.Block {
		m["block"] = true
	}
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
	if l.Block {
		parts = append(parts, "block (every request refused)")
	}
	if l.Limit > 0 {
		parts = append(parts, "limit "+strconv.FormatInt(l.Limit, 10))
	}
	if l.Window > 0 {
		parts = append(parts, "window "+policy.FormatDuration(l.Window))
	}
	if l.Burst > 0 {
		parts = append(parts, "burst "+strconv.FormatInt(l.Burst, 10))
	}
	return strings.Join(parts, ", ")
}

// wholeSeconds is d in whole seconds, rounded up, as the RateLimit headers
// say it.
func wholeSeconds(d time.Duration) int64 { return int64((max(d, 0) + time.Second - 1) / time.Second) }
