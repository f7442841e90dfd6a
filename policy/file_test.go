package policy_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit/durablecounter"
	"github.com/edgelimit/edgelimit/kvbucket"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/signedwindow"
)

func TestLoadExamplePolicies(t *testing.T) {
	f, err := policy.Load("../cmd/edgelimit/policies.yaml")
	if err != nil {
		t.Fatalf("Load(../cmd/edgelimit/policies.yaml): %v", err)
	}
	if got := len(f.Policies); got < 5 {
		t.Fatalf("policies = %d, want at least 5", got)
	}
	byName := map[string]*policy.Policy{}
	for _, p := range f.Policies {
		byName[p.Name] = p
	}
	paid := byName["paid-daily"]
	if paid == nil || paid.Limit != 1000 || paid.Window != 24*time.Hour || paid.OnStoreError != policy.FailClosed ||
		paid.Key.String() != "header:X-Api-Key" {
		t.Errorf("paid-daily = %+v", paid)
	}
	if b := byName["paid-burst"]; b == nil || *b.Options.(*durablecounter.Options) != (durablecounter.Options{Algorithm: durablecounter.GCRA, Burst: 20, Shards: 1, DenyCache: true}) {
		t.Errorf("paid-burst = %+v", b)
	}
	if c := byName["contact"]; c == nil || c.OnStoreError != policy.FailOpen || c.Strategy != kvbucket.Strategy || *c.Options.(*kvbucket.Options) != (kvbucket.Options{}) {
		t.Errorf("contact defaults = %+v, want fail open, kv, burst and sync interval their defaults", c)
	}
	if tts := byName["tts"]; tts == nil || !reflect.DeepEqual(tts.Options, &signedwindow.Options{ProofOfWork: &signedwindow.ProofOfWork{Bits: 16, TTL: 10 * time.Second}}) {
		t.Errorf("tts = %+v", tts)
	}
}

func TestPolicyDefaults(t *testing.T) {
	f, err := policy.Parse("p.yaml", []byte(`version: 1
policies:
  - name: a
    routes: ["GET /a"]
    key: ip
    strategy: durable
    limit: 3
    window: 1d
`))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Policies[0]
	want := policy.Policy{Name: "a", Strategy: durablecounter.Strategy, Limit: 3, Window: 24 * time.Hour,
		Cost: 1, OnStoreError: policy.FailClosed, StoreTimeout: 100 * time.Millisecond, IPv6Prefix: 64, Line: 3, OverrideStaleness: time.Minute,
		StoreBreaker: policy.Breaker{Failures: 5, CoolDown: time.Second, Probes: 3},
		Options:      &durablecounter.Options{Algorithm: durablecounter.FixedWindow, Shards: 1, DenyCache: true}}
	p.Routes, p.Key = nil, policy.KeySource{}
	if !reflect.DeepEqual(*p, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", *p, want)
	}
	if !f.LegacyHeaders {
		t.Error("LegacyHeaders default = false, want true")
	}
}

// Each bad file must fail at load with the file, line, policy and field named.
func TestParseErrors(t *testing.T) {
	head := "version: 1\npolicies:\n"
	pol := func(extra string) string {
		return head + "  - name: paid\n    routes: [\"GET /paid/*\"]\n    key: header:X-Api-Key\n    strategy: durable\n    limit: 10\n" + extra
	}
	tests := []struct {
		name, file string
		want       []string
	}{
		{"window without unit", pol("    window: 10\n"), []string{`p.yaml:8: policy "paid": window "10" needs a unit, like 10s`}},
		{"unknown field with hint", pol("    window: 1m\n    windw: 1m\n"), []string{`p.yaml:9: policy "paid": unknown field "windw" (did you mean "window"?)`}},
		{"unknown top-level field", "version: 1\npolicy: []\n", []string{`p.yaml:2: unknown field "policy" (did you mean "policies"?)`}},
		{"bad version", "version: 2\npolicies: []\n", []string{"p.yaml:1: version 2 is not supported"}},
		{"missing version", "policies:\n  - name: a\n", []string{"missing `version: 1`"}},
		{"not yaml", "version: [1\n", []string{"p.yaml:1: not valid YAML"}},
		{"empty", "", []string{"file is empty"}},
		{"bad strategy", head + "  - name: a\n    routes: [\"GET /a\"]\n    key: ip\n    strategy: durabel\n    limit: 1\n    window: 1s\n",
			[]string{`p.yaml:6: policy "a": strategy "durabel" is not one of durable, kv, signed (did you mean "durable"?)`}},
		{"bad algorithm", pol("    window: 1m\n    algorithm: leaky\n"), []string{`p.yaml:9: policy "paid": algorithm "leaky" is not one of`}},
		{"bad key", head + "  - name: a\n    routes: [\"GET /a\"]\n    key: cookie:x\n    strategy: kv\n    limit: 1\n    window: 1s\n",
			[]string{`p.yaml:5: policy "a": key "cookie:x" is not one of ip, global, header:NAME, claim:NAME`}},
		{"bad route", head + "  - name: a\n    routes: [\"GET paid\"]\n    key: ip\n    strategy: kv\n    limit: 1\n    window: 1s\n",
			[]string{`p.yaml:4: policy "a": route "GET paid": path must start with /`}},
		{"star in middle", head + "  - name: a\n    routes: [\"GET /a/*/b\"]\n    key: ip\n    strategy: kv\n    limit: 1\n    window: 1s\n",
			[]string{"may contain * only at the end"}},
		{"bad method", head + "  - name: a\n    routes: [\"FETCH /a\"]\n    key: ip\n    strategy: kv\n    limit: 1\n    window: 1s\n",
			[]string{`method "FETCH" is not one of`}},
		{"duplicate name", head + "  - {name: a, routes: [\"GET /a\"], key: ip, strategy: kv, limit: 1, window: 1s}\n  - {name: a, routes: [\"GET /b\"], key: ip, strategy: kv, limit: 1, window: 1s}\n",
			[]string{`p.yaml:4: policy "a": name already used by the policy on line 3`}},
		{"bad name", head + "  - {name: Paid_API, routes: [\"GET /a\"], key: ip, strategy: kv, limit: 1, window: 1s}\n",
			[]string{`name "Paid_API" must be 1-64 characters`}},
		{"negative limit", strings.Replace(pol("    window: 1m\n"), "limit: 10", "limit: -1", 1), []string{"limit -1 must not be negative"}},
		{"limit not a number", strings.Replace(pol("    window: 1m\n"), "limit: 10", "limit: ten", 1), []string{`limit "ten" must be a whole number`}},
		{"burst on fixed window", pol("    window: 1m\n    burst: 5\n"), []string{"burst applies only to algorithm gcra and strategy kv"}},
		{"cost above limit", pol("    window: 1m\n    cost: 11\n"), []string{"cost 11 is more than the limit 10"}},
		{"reserve without charge", pol("    window: 1m\n    reserve: 5\n"), []string{`p.yaml:9: policy "paid": reserve needs charge: response`}},
		{"reserve 0", pol("    window: 1m\n    charge: response\n    reserve: 0\n"), []string{`p.yaml:10: policy "paid": reserve 0 must be at least 1`}},
		{"cost above kv burst", head + "  - {name: a, routes: [\"GET /a\"], key: ip, strategy: kv, limit: 10, burst: 2, cost: 3, window: 1s}\n",
			[]string{"cost 3 is more than the burst 2"}},
		{"bad store mode", pol("    window: 1m\n    on_store_error: maybe\n"), []string{`on_store_error "maybe" is not one of allow, deny, local`}},
		{"local on signed", head + "  - {name: a, routes: [\"GET /a\"], key: ip, strategy: signed, limit: 1, window: 1s, on_store_error: local}\n",
			[]string{"on_store_error local needs a store"}},
		{"tiers on signed", head + "  - {name: a, routes: [\"GET /a\"], key: ip, strategy: signed, limit: 1, window: 1s,\n     tiers: {by: \"header:X-Plan\", default: pro, levels: {pro: {limit: 5}}}}\n",
			[]string{`p.yaml:4: policy "a": tiers needs a strategy whose limits can change per request; strategy signed takes its limit from the policy only`}},
		{"overrides on signed", head + "  - {name: a, routes: [\"GET /a\"], key: ip, strategy: signed, limit: 1, window: 1s, overrides: true}\n",
			[]string{"overrides needs a strategy whose limits can change per request"}},
		{"pow on durable without above", pol("    window: 1m\n    proof_of_work: {bits: 8}\n"), []string{"proof_of_work needs above"}},
		{"pow on inflight", head + "  - {name: a, routes: [\"GET /a\"], key: ip, strategy: inflight, limit: 1, window: 1m, proof_of_work: {above: 0}}\n", []string{"proof_of_work"}},
		{"pow bits", head + "  - {name: a, routes: [\"GET /a\"], key: ip, strategy: signed, limit: 1, window: 1s, proof_of_work: {bits: 40}}\n",
			[]string{"proof_of_work.bits 40 must be between 1 and 32"}},
		{"trusted proxies with header key", pol("    window: 1m\n    trusted_proxies: 1\n"), []string{"trusted_proxies applies only when the key is ip"}},
		{"missing fields", head + "  - name: a\n", []string{"missing `strategy`", "missing `routes`", "missing `key`", "missing `limit`", "missing `window`"}},
		{"second document", head + "  - {name: a, routes: [\"GET /a\"], key: ip, strategy: kv, limit: 1, window: 1s}\n---\nversion: 1\n", []string{"more than one YAML document"}},
		{"duration garbage", pol("    window: soon\n"), []string{`window "soon" is not a duration`}},
		{"zero duration", pol("    window: 0s\n"), []string{`window "0s" must be positive`}},
		{"another strategy's field", pol("    window: 1m\n    sync_interval: 1s\n"), []string{`p.yaml:9: policy "paid": sync_interval applies only to strategy kv`}},
		{"breaker not a mapping", pol("    window: 1m\n    store_breaker: on\n"), []string{`p.yaml:9: policy "paid": store_breaker must be off or a mapping`}},
		{"breaker unknown field", pol("    window: 1m\n    store_breaker: {failure: 3}\n"),
			[]string{`p.yaml:9: policy "paid": unknown field store_breaker.failure (did you mean "failures"?)`}},
		{"breaker zero failures", pol("    window: 1m\n    store_breaker: {failures: 0}\n"), []string{"store_breaker.failures 0 must be between 1 and 1000"}},
		{"breaker short cool-down", pol("    window: 1m\n    store_breaker: {cool_down: 1ms}\n"), []string{"store_breaker.cool_down 1ms must be between 10ms and 10m"}},
		{"breaker probes", pol("    window: 1m\n    store_breaker: {probes: 101}\n"), []string{"store_breaker.probes 101 must be between 1 and 100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.Parse("p.yaml", []byte(tt.file))
			if err == nil {
				t.Fatalf("policy.Parse succeeded, want errors %q", tt.want)
			}
			if !errors.Is(err, policy.ErrBadFile) {
				t.Errorf("error does not wrap ErrBadFile: %v", err)
			}
			var pe *policy.Error
			if !errors.As(err, &pe) {
				t.Errorf("error has no *PolicyError: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestStoreBreaker: store_breaker keeps the defaults of the fields it does
// not set, and off turns the breaker off.
func TestStoreBreaker(t *testing.T) {
	for _, tt := range []struct {
		field string
		want  policy.Breaker
	}{
		{"", policy.DefaultBreaker},
		{"store_breaker: {failures: 3}", policy.Breaker{Failures: 3, CoolDown: time.Second, Probes: 3}},
		{"store_breaker: {cool_down: 250ms, probes: 2}", policy.Breaker{Failures: 5, CoolDown: 250 * time.Millisecond, Probes: 2}},
		{"store_breaker: off", policy.Breaker{Off: true}},
	} {
		f, err := policy.Parse("p.yaml", []byte("version: 1\npolicies:\n  - name: a\n    routes: [\"GET /a\"]\n    key: ip\n    strategy: durable\n    limit: 3\n    window: 1m\n    "+tt.field+"\n"))
		if err != nil {
			t.Fatalf("%q: %v", tt.field, err)
		}
		if got := f.Policies[0].StoreBreaker; got != tt.want {
			t.Errorf("%q: StoreBreaker = %+v, want %+v", tt.field, got, tt.want)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := policy.Load("does-not-exist.yaml")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("policy.Load(missing) = %v, want os.ErrNotExist", err)
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"10s", 10 * time.Second, ""},
		{"1d", 24 * time.Hour, ""},
		{"1h30m", 90 * time.Minute, ""},
		{"10", 0, `"10" needs a unit, like 10s`},
		{"1.5", 0, "needs a unit"},
		{"", 0, "empty"},
		{"-1s", 0, "must be positive"},
		{"0d", 0, "between 1d and 3650d"},
		{"1us", 0, "shorter than 1ms"},
		{"xd", 0, "is not a duration"},
	}
	for _, tt := range tests {
		got, err := policy.ParseDuration(tt.in)
		if tt.err == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseDuration(%q) error = %v, want %q", tt.in, err, tt.err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{24 * time.Hour: "1d", time.Minute: "1m", 90 * time.Second: "1m30s", time.Hour: "1h", 1500 * time.Millisecond: "1.5s"} {
		if got := policy.FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../cmd/edgelimit/policies.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("version: 1\npolicies:\n  - {name: a, routes: [\"GET /a/*\"], key: header:X, strategy: kv, limit: 1, window: 1s}\n"))
	f.Add([]byte("version: 1\npolicies: [{name: a, proof_of_work: {bits: 8, ttl: 1s}}]\n"))
	f.Add([]byte("{version: 1, policies: [[]], legacy_headers: false}"))
	f.Add([]byte("version: 1\npolicies:\n  - {name: a, routes: [\"GET /a\"], key: ip, strategy: durable, limit: 5, window: month, period_start: 31, time_zone: Europe/Berlin,\n     tiers: {by: \"header:X\", default: a, levels: {a: {window: year}}}}\n"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pf, err := policy.Parse("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, policy.ErrBadFile) {
				t.Fatalf("error does not wrap ErrBadFile: %v", err)
			}
			return
		}
		for _, p := range pf.Policies {
			if p.Name == "" || len(p.Routes) == 0 || p.Window <= 0 || p.Limit < 0 || p.Cost < 1 || p.StoreTimeout <= 0 {
				t.Fatalf("accepted an incomplete policy: %+v", p)
			}
		}
	})
}

// Regression (issue 15, item 5): a YAML syntax error is one clean message
// at its true line. The YAML library reports several of these at the line
// where the enclosing collection starts, counted from 0.
func TestYAMLSyntaxErrors(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"unclosed [ on line 4", "version: 1\npolicies:\n  - name: a\n    routes: [\"GET /a\"\n    key: ip\n",
			`p.yaml:4: not valid YAML: did not find expected ',' or ']'`},
		{"tab on line 7", "version: 1\npolicies:\n  - name: a\n    routes: [\"GET /a\"]\n    key: ip\n    strategy: kv\n\tlimit: 5\n",
			`p.yaml:7: not valid YAML: found a tab character that violates indentation (indent with spaces)`},
		{"unclosed quote on line 4", "version: 1\npolicies:\n  - name: a\n    routes: \"GET /a\n    key: ip\n",
			`p.yaml:4: not valid YAML: found unexpected end of stream`},
		{"unclosed { on line 4", "version: 1\npolicies:\n  - name: a\n    pow: {bits: 3\n    key: ip\n",
			`p.yaml:4: not valid YAML: did not find expected ',' or '}'`},
		{"a second colon on line 1", "a: b: c\n", `p.yaml:1: not valid YAML: mapping values are not allowed in this context`},
		{"stray ] on line 4", "version: 1\npolicies:\n  - name: a\n    routes: [\"GET /a\"]]\n    key: ip\n",
			`p.yaml:4: not valid YAML: did not find expected key`},
		{"bad indentation on line 5", "version: 1\npolicies:\n  - name: a\n    routes: [\"GET /a\"]\n   key: ip\n    limit: 3\n",
			`p.yaml:5: not valid YAML: did not find expected '-' indicator`},
		{"unknown anchor on line 4", "version: 1\npolicies:\n  - name: a\n    key: *nope\n", `p.yaml:4: not valid YAML: unknown anchor 'nope' referenced`},
		{"a list continued over lines is fine until the error", "version: 1\npolicies:\n  - name: a\n    routes: [\"GET /a\",\n      \"GET /b\"]\n    key: ip\n\tlimit: 2\n",
			`p.yaml:7: not valid YAML: found a tab character that violates indentation (indent with spaces)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.Parse("p.yaml", []byte(tt.file))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error =\n%v\nwant\n%s", err, tt.want)
			}
			if !errors.Is(err, policy.ErrBadFile) {
				t.Errorf("not ErrBadFile: %v", err)
			}
		})
	}
}

// The path is shown as given, and the message is the problems alone.
func TestLoadNamesThePathAsGiven(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.MkdirAll(filepath.Join("sub", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := "sub/dir/x.yaml"
	if err := os.WriteFile(path, []byte("version: 1\npolicies:\n  - {name: a, routes: [\"GET /a\"], key: ip, strategy: kv, limit: 1,\n     window: 10}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := policy.Load(path)
	if want := `sub/dir/x.yaml:4: policy "a": window "10" needs a unit, like 10s`; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
	if strings.Contains(err.Error(), "bad policy file") {
		t.Errorf("error repeats the sentinel's text: %v", err)
	}
}

// Regression (issue 15, item 5): a route listed twice in one policy, in
// any spelling, is refused.
func TestDuplicateRoute(t *testing.T) {
	_, err := policy.Parse("p.yaml", []byte("version: 1\npolicies:\n  - name: a\n    routes:\n      - POST /contact\n      - POST /contact/\n    key: ip\n    strategy: kv\n    limit: 1\n    window: 1s\n"))
	if want := `p.yaml:6: policy "a": route "POST /contact/" is listed twice (it matches what "POST /contact" does)`; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}
