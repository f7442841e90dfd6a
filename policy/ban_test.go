package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/policy"
)

func banFile(strategy, ban string) string {
	return "version: 1\npolicies:\n  - name: paid\n    routes: [\"GET /paid/*\"]\n    key: header:X-Api-Key\n    strategy: " + strategy +
		"\n    limit: 10\n    window: 1m\n    ban: " + ban + "\n"
}

func TestBanFields(t *testing.T) {
	f, err := policy.Parse("p.yaml", []byte(banFile("durable", "{after: 3, within: 10m, for: 15m, growth: 1.5, max: 2h, decay: 6h, staleness: 2s}")))
	if err != nil {
		t.Fatal(err)
	}
	got := *f.Policies[0].Ban
	want := policy.Ban{After: 3, Within: 10 * time.Minute, For: 15 * time.Minute, Growth: 1.5, Max: 2 * time.Hour, Decay: 6 * time.Hour,
		Staleness: 2 * time.Second, Line: 9}
	if got != want {
		t.Errorf("Ban = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "{after: 3, within: 10m, for: 15m, growth: 1.5, max: 2h, decay: 6h, staleness: 2s}" {
		t.Errorf("String = %s", s)
	}
	// Defaults: within the window, growth 2, max 24h (or for), decay 24h,
	// staleness 5s.
	f, err = policy.Parse("p.yaml", []byte(banFile("kv", "{after: 1, for: 48h}")))
	if err != nil {
		t.Fatal(err)
	}
	got = *f.Policies[0].Ban
	want = policy.Ban{After: 1, Within: time.Minute, For: 48 * time.Hour, Growth: 2, Max: 48 * time.Hour, Decay: 24 * time.Hour, Staleness: 5 * time.Second, Line: 9}
	if got != want {
		t.Errorf("defaults: Ban = %+v, want %+v", got, want)
	}
	f, err = policy.Parse("p.yaml", []byte(banFile("durable", "{after: 1, for: 1m}")))
	if err != nil || f.Policies[0].Ban.Max != 24*time.Hour {
		t.Errorf("default max: %v, %v", f, err)
	}
	f, err = policy.Parse("p.yaml", []byte("version: 1\npolicies:\n  - {name: a, routes: [\"GET /a\"], key: ip, strategy: durable, limit: 1, window: 1m}\n"))
	if err != nil || f.Policies[0].Ban != nil {
		t.Errorf("no ban field: Ban = %v, %v", f.Policies[0].Ban, err)
	}
}

func TestBanErrors(t *testing.T) {
	for _, tc := range []struct{ name, strategy, ban, want string }{
		{"not a mapping", "durable", "3", `p.yaml:9: policy "paid": ban must be a mapping, like {after: 3, within: 10m, for: 15m, growth: 2, max: 24h}`},
		{"no after", "durable", "{for: 1m}", "ban needs `after`"},
		{"no for", "durable", "{after: 3}", "ban needs `for`"},
		{"after zero", "durable", "{after: 0, for: 1m}", `p.yaml:9: policy "paid": ban.after 0 must be between 1 and 1000000`},
		{"growth below 1", "durable", "{after: 1, for: 1m, growth: 0.5}", "ban.growth 0.5 must be between 1 (every ban as long) and 100"},
		{"growth not a number", "durable", "{after: 1, for: 1m, growth: x}", `ban.growth "x" must be a number`},
		{"max below for", "durable", "{after: 1, for: 1h, max: 1m}", "ban.max 1m is shorter than ban.for 1h"},
		{"unknown field", "durable", "{after: 1, for: 1m, fro: 1m}", `unknown field ban.fro (did you mean "for"?)`},
		{"bad duration", "durable", "{after: 1, for: 10}", `ban.for "10" needs a unit`},
		{"too long", "durable", "{after: 1, for: 400d}", "ban.for 400d is longer than 365d"},
		{"staleness", "durable", "{after: 1, for: 1m, staleness: 1h}", "ban.staleness 1h is longer than 10m"},
		{"signed", "signed", "{after: 1, for: 1m}", `p.yaml:9: policy "paid": ban needs a strategy whose denials a shared store counts (durable or kv); strategy signed cannot ban`},
	} {
		_, err := policy.Parse("p.yaml", []byte(banFile(tc.strategy, tc.ban)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
