package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/edgelimit/edgelimit/policy"
)

const checkUsage = `usage: edgelimit check FILE

Validates a policy file and everything edgelimit serve reads with it at
start-up: each list's file and environment variable, and EDGELIMIT_HASH_KEY
and EDGELIMIT_SECRETS when they are set. A bad entry is named by its file
and line (a list file's own), or by its variable and the value's position.
Then prints which policies guard which routes, the tiers and the lists.
`

func runCheck(args []string, stdout, stderr io.Writer) int {
	c := newCmdline("check", checkUsage)
	pos, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(stderr, "want one FILE, got %d arguments", len(pos))
	}
	f, err := policy.Load(pos[0])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
	}
	// What serve builds at start-up, on the memory store: the same reads,
	// the same checks, the same messages, and no network.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := newEngine(context.Background(), serveFlags{store: "memory"}, f, quiet, io.Discard); err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
	}
	printTable(stdout, f)
	return exitOK
}

// printTable writes the routes -> policies table, one row per route of each
// policy, in file order. OPTIONS is what the policy's strategy says of its
// own fields (an algorithm, a burst, proof of work); NOTES the engine's
// (tiers, overrides, a charge after the response, max_delay, a ban: "ban=
// AFTER/WITHIN:FOR", banned for FOR after AFTER denials within WITHIN).
func printTable(w io.Writer, f *policy.File) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tPOLICY\tSTRATEGY\tLIMIT\tWINDOW\tOPTIONS\tKEY\tON STORE ERROR\tNOTES")
	for _, p := range f.Policies {
		var notes []string
		if p.Shadow {
			notes = append(notes, "shadow")
		}
		if p.Cost > 1 {
			notes = append(notes, "cost="+strconv.FormatInt(p.Cost, 10))
		}
		if p.MissingKeyToIP {
			notes = append(notes, "missing-key->ip")
		}
		if p.TrustedProxies > 0 {
			notes = append(notes, "trusted_proxies="+strconv.Itoa(p.TrustedProxies))
		}
		if p.Tiers != nil {
			notes = append(notes, "tiers="+p.Tiers.By.String())
		}
		if p.Overrides {
			notes = append(notes, "overrides="+policy.FormatDuration(p.OverrideStaleness))
		}
		if p.ChargeAfter {
			charge := "charge=response"
			if p.Reserve > 0 {
				charge += " reserve=" + strconv.FormatInt(p.Reserve, 10)
			}
			notes = append(notes, charge)
		}
		if p.MaxDelay > 0 {
			notes = append(notes, "max_delay="+policy.FormatDuration(p.MaxDelay))
		}
		if b := p.Ban; b != nil {
			notes = append(notes, fmt.Sprintf("ban=%d/%s:%s", b.After, policy.FormatDuration(b.Within), policy.FormatDuration(b.For)))
		}
		opts := "-"
		if s, ok := p.Options.(fmt.Stringer); ok {
			opts = s.String()
		}
		for _, r := range p.Routes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r, p.Name, p.StrategyName(), p.Limit,
				windowText(p.Window, p.Period), opts, p.Key, p.OnStoreError, strings.Join(notes, " "))
		}
	}
	tw.Flush()
	if hasTiers(f) {
		fmt.Fprintln(w)
		printTiers(w, f)
	}
	if len(f.Lists) > 0 {
		fmt.Fprintln(w)
		printLists(w, f.Lists)
	}
	fmt.Fprintf(w, "%s: %s OK\n", f.Source, countOf(len(f.Policies), "policy", "policies"))
}

func hasTiers(f *policy.File) bool {
	for _, p := range f.Policies {
		if p.Tiers != nil {
			return true
		}
	}
	return false
}

// printTiers writes each tier of each policy with tiers: the quota it
// gives (its fields, or the policy's where it has none), which tier a
// request without the key gets, and what a request naming no known tier
// gets.
func printTiers(w io.Writer, f *policy.File) {
	var buf strings.Builder
	defer func() { // no padding after the last cell
		for _, line := range strings.SplitAfter(buf.String(), "\n") {
			if line != "" {
				fmt.Fprintln(w, strings.TrimRight(line, " \n"))
			}
		}
	}()
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY	TIER	BY	LIMIT	WINDOW	BURST	NOTES")
	for _, p := range f.Policies {
		t := p.Tiers
		if t == nil {
			continue
		}
		for _, name := range t.Names {
			l := t.Levels[name].Or(policy.Limits{Limit: p.Limit, Window: p.Window, Period: p.Period})
			burst := "-"
			if l.Burst > 0 {
				burst = strconv.FormatInt(l.Burst, 10)
			}
			var notes []string
			if name == t.Default {
				notes = append(notes, "default")
				if t.RejectUnknown {
					notes = append(notes, "unknown tier: 400")
				} else {
					notes = append(notes, "also for an unknown tier")
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Name, name, t.By, l.Limit, windowText(l.Window, l.Period), burst, strings.Join(notes, ", "))
		}
	}
	tw.Flush()
}

// printLists writes the allow and deny lists, checked before any policy.
// A list's file and environment variable are read when the engine starts.
func printLists(w io.Writer, lists []*policy.List) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LIST\tACTION\tMATCH\tROUTES\tVALUES")
	for _, l := range lists {
		action := "allow"
		if l.Deny {
			action = "deny"
		}
		routes := "*"
		if len(l.Routes) > 0 {
			rs := make([]string, len(l.Routes))
			for i, r := range l.Routes {
				rs[i] = r.String()
			}
			routes = strings.Join(rs, ",")
		}
		vals := []string{countOf(len(l.Values), "value", "values")}
		if l.File != "" {
			vals = append(vals, "file "+l.File)
		}
		if l.Env != "" {
			vals = append(vals, "env "+l.Env)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Name, action, l.Match, routes, strings.Join(vals, " + "))
	}
	tw.Flush()
}

// formatDuration writes d compactly (1d, 24h, 1m30s).

func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
