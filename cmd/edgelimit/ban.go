package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
)

// The operator's commands on a client key's ban, for a policy with a ban
// field, in the deployed table (or a local server's). As with usage, the
// key is the raw client key, hashed with EDGELIMIT_HASH_KEY as the
// functions hash it, and never printed.

const banUsage = `Usage:
  edgelimit ban list [flags] POLICY KEY   show the key's ban: in force until when, its level, the denials counted
  edgelimit ban lift [flags] POLICY KEY   lift the key's ban and forget its denials and level

KEY is the client key as requests carry it (an API key, an address, a claim's
value); EDGELIMIT_HASH_KEY (the functions' hash key) must be set. list shows
one key: the table is not scanned for every banned key. A lift applies on
every instance within the policy's ban.staleness. Flags may come before,
between or after the arguments.
`

func runBan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f opFlags
	c := newCmdline("ban", banUsage)
	fs := c.fs
	fs.StringVar(&f.policies, "policies", os.Getenv(setup.EnvPolicyFile), "policy file (default: EDGELIMIT_POLICY_FILE, as the functions read it, else the embedded example policies.yaml)")
	fs.StringVar(&f.table, "table", defaultTable(), "DynamoDB table (EDGELIMIT_TABLE sets the default)")
	fs.StringVar(&f.endpoint, "dynamodb-endpoint", os.Getenv(setup.EnvEndpoint), "DynamoDB endpoint URL of a local server (default: EDGELIMIT_DYNAMODB_ENDPOINT, else AWS)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a sentence")
	if _, pos := c.split(args); len(pos) > 0 && (pos[0] == "list" || pos[0] == "lift") {
		c.name = "ban " + pos[0] // for messages
	}
	rest, code, ok := c.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(rest) == 0 || rest[0] != "list" && rest[0] != "lift" {
		return c.usageError(stderr, "say list or lift")
	}
	action, rest := rest[0], rest[1:]
	if len(rest) != 2 {
		return c.usageError(stderr, "want 2 arguments, got %d", len(rest))
	}
	pol, key := rest[0], rest[1]
	e, p, at, err := operatorEngine(ctx, f, pol, "ban")
	if err != nil {
		return c.fail(stderr, err)
	}
	if p.Ban == nil {
		return c.fail(stderr, fmt.Errorf("policy %q has no ban (add a ban field to it, like ban: {after: 3, within: 10m, for: 15m})", pol))
	}
	fail := func(err error) int { return c.fail(stderr, dynamoError(err, at, tableFix)) }
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	switch action {
	case "list":
		b, err := e.Ban(cctx, pol, key)
		if err != nil {
			return fail(err)
		}
		// A ban's end is shown rounded up to its second, as the 429's
		// Retry-After counts to it: the key is free from that second on.
		if !b.Until.IsZero() {
			b.Until = ceilSecond(b.Until)
		}
		j := map[string]any{"policy": pol, "banned": b.Banned, "until": jsonTime(b.Until), "level": b.Level,
			"denials": b.Denials, "since": jsonTime(b.Since)}
		var s strings.Builder
		fmt.Fprintf(&s, "policy %s: ", pol)
		switch {
		case b.Banned:
			fmt.Fprintf(&s, "banned until %s (ban %d of its run)", b.Until.UTC().Format(time.RFC3339), b.Level)
		case b.Level > 0:
			fmt.Fprintf(&s, "not banned; its last ban ended %s (%d bans in its run)", b.Until.UTC().Format(time.RFC3339), b.Level)
		default:
			s.WriteString("not banned")
		}
		if b.Denials > 0 {
			fmt.Fprintf(&s, "; %d of %d denials counted since %s", b.Denials, p.Ban.After, b.Since.UTC().Format(time.RFC3339))
		}
		report(stdout, f, j, "%s\n", s.String())
	case "lift":
		if err := e.Unban(cctx, pol, key); err != nil {
			return fail(err)
		}
		report(stdout, f, map[string]any{"policy": pol, "lifted": true},
			"policy %s: the key's ban, denials and level are lifted; every instance applies it within the policy's ban.staleness (%s)\n",
			pol, policy.FormatDuration(p.Ban.Staleness))
	}
	return exitOK
}
