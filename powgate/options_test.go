package powgate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/powgate"
)

// gatedTest is a strategy of this test binary only, declaring
// proof_of_work the way durable and kv are to (and a burst, for the
// capacity), so that Parse runs inside the real policy parser.
var gatedTest = &policy.Strategy{
	Name:         "gated-test",
	Package:      "github.com/edgelimit/edgelimit/powgate (tests)",
	Fields:       []string{powgate.Field, "burst"},
	OnStoreError: policy.FailOpen,
	Limits:       true, // the tiers case: a share follows the tier's quota
	Parse: func(f *policy.Fields) any {
		capacity := f.Policy().Limit
		if b, ok := f.Int("burst"); ok {
			capacity = b
		}
		return powgate.Parse(f, powgate.Field, capacity)
	},
}

func init() { policy.Register(gatedTest) }

// policyFile is a file of one gated-test policy with the given extra
// lines (indented as policy fields); the policy starts on line 3.
func policyFile(extra ...string) []byte {
	var b strings.Builder
	b.WriteString("version: 1\npolicies:\n  - name: search\n    routes: [\"GET /search\"]\n    key: ip\n    strategy: gated-test\n    limit: 100\n    window: 1m\n")
	for _, l := range extra {
		b.WriteString("    " + l + "\n")
	}
	return []byte(b.String())
}

// TestParse: what proof_of_work reads, with its defaults.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  *powgate.Options
	}{
		{"absent", nil, nil},
		{"defaults", []string{"proof_of_work: {above: 80}"}, &powgate.Options{Above: 80, Bits: 16, TTL: 10 * time.Second}},
		{"all", []string{"proof_of_work: {above: 0, bits: 12, ttl: 30s}"}, &powgate.Options{Above: 0, Bits: 12, TTL: 30 * time.Second}},
		{"percent", []string{"proof_of_work: {above: 80%}"}, &powgate.Options{AbovePercent: 80, Bits: 16, TTL: 10 * time.Second}},
		{"quoted percent", []string{`proof_of_work: {above: "5 %", bits: 32, ttl: 10m}`}, &powgate.Options{AbovePercent: 5, Bits: 32, TTL: 10 * time.Minute}},
		{"block mapping", []string{"proof_of_work:", "  above: 99", "  bits: 1"}, &powgate.Options{Above: 99, Bits: 1, TTL: 10 * time.Second}},
		{"below the burst", []string{"burst: 200", "proof_of_work: {above: 150}"}, &powgate.Options{Above: 150, Bits: 16, TTL: 10 * time.Second}},
		{"tiers", []string{"tiers: {by: header:X-Plan, default: free, levels: {free: {limit: 100}, pro: {limit: 10000}}}", "proof_of_work: {above: 8000}"},
			&powgate.Options{Above: 8000, Bits: 16, TTL: 10 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pf, err := policy.Parse("test.yaml", policyFile(tc.lines...))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := pf.Policies[0].Options.(*powgate.Options)
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Fatalf("Options = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestParseErrors: each problem is reported at its line, and says what is
// wrong.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		line  int
		want  string
	}{
		{"no above", []string{"proof_of_work: {bits: 12}"}, 9, "needs above"},
		{"not a mapping", []string{"proof_of_work: 80"}, 9, "must be a mapping"},
		{"unknown field", []string{"proof_of_work: {above: 1, bit: 12}"}, 9, "unknown field proof_of_work.bit"},
		{"above the limit", []string{"proof_of_work:", "  above: 100"}, 10, "less than the quota of 100"},
		{"above the burst", []string{"burst: 20", "proof_of_work:", "  above: 20"}, 11, "less than the quota of 20"},
		{"negative", []string{"proof_of_work:", "  above: -1"}, 10, "must not be negative"},
		{"not a number", []string{"proof_of_work:", "  above: lots"}, 10, "whole number of units"},
		{"a fraction", []string{"proof_of_work:", "  above: 0.5"}, 10, "whole number of units"},
		{"0%", []string{"proof_of_work:", "  above: 0%"}, 10, "from 1% to 99%"},
		{"100%", []string{"proof_of_work:", "  above: 100%"}, 10, "from 1% to 99%"},
		{"a list", []string{"proof_of_work:", "  above: [1]"}, 10, "must be a string"},
		{"bits 0", []string{"proof_of_work:", "  above: 1", "  bits: 0"}, 11, "between 1 and 32"},
		{"bits 33", []string{"proof_of_work:", "  above: 1", "  bits: 33"}, 11, "between 1 and 32"},
		{"ttl", []string{"proof_of_work:", "  above: 1", "  ttl: 11m"}, 11, "longer than 10m"},
		{"ttl unit", []string{"proof_of_work:", "  above: 1", "  ttl: 10"}, 11, "needs a unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse("test.yaml", policyFile(tc.lines...))
			var es policy.Errors
			if !errors.As(err, &es) {
				t.Fatalf("policy.Parse = %v, want policy.Errors", err)
			}
			for _, e := range es {
				if e.Line == tc.line && strings.Contains(e.Msg, tc.want) {
					return
				}
			}
			t.Fatalf("policy.Parse = %v\nwant an error at line %d saying %q", err, tc.line, tc.want)
		})
	}
}

// TestOptionsString: what `edgelimit check` shows.
func TestOptionsString(t *testing.T) {
	for o, want := range map[powgate.Options]string{
		{Above: 80}: "proof of work above 80 (16 bits, 10s)",
		{AbovePercent: 75, Bits: 20, TTL: time.Minute}: "proof of work above 75% (20 bits, 1m0s)",
	} {
		if got := o.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", o, got, want)
		}
	}
}

// FuzzParse: whatever proof_of_work holds, the policy parser neither
// panics nor accepts options a Gate would refuse or that exceed the
// hard limit.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"{above: 80}", "{above: 80%, bits: 12, ttl: 30s}", "{above: 0}", "{above: 99, bits: 32, ttl: 10m}",
		"{above: -1}", "{above: 100}", "{above: 1e3}", "{above: 50%%}", "{above: ' 7 % '}", "80", "[1, 2]",
		"{above: 1, bits: 0}", "{above: 1, ttl: 0s}", "{above: 1, ttl: -1s}", "{above: 9223372036854775807}",
		"{above: 0x10}", "{above: 1_0}", "{above: +5}", "{above: 010%}", "\n  above: 3\n  bits: 2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		if strings.ContainsAny(value, "\r") {
			return
		}
		pf, err := policy.Parse("fuzz.yaml", policyFile("proof_of_work: "+value))
		if err != nil {
			if !errors.Is(err, policy.ErrBadFile) {
				t.Fatalf("policy.Parse(%q) = %v, not ErrBadFile", value, err)
			}
			return
		}
		o, _ := pf.Policies[0].Options.(*powgate.Options)
		if o == nil {
			return // the value was an empty mapping or null: no gate
		}
		switch {
		case o.AbovePercent < 0 || o.AbovePercent > 99:
			t.Fatalf("%q: AbovePercent %d accepted", value, o.AbovePercent)
		case o.AbovePercent == 0 && (o.Above < 0 || o.Above >= 100):
			t.Fatalf("%q: Above %d accepted for a limit of 100", value, o.Above)
		}
		pol := pf.Policies[0]
		plain := &policy.Policy{Name: pol.Name, Limit: pol.Limit, Window: pol.Window}
		if _, err := powgate.Wrap(inners[0].new(t, plain, nil), powgate.Config{Policy: pol, Options: *o, Secrets: [][]byte{secret}}); err != nil {
			t.Fatalf("%q: parsed %+v, which Wrap refuses: %v", value, *o, err)
		}
	})
}

// TestGating: the Factory wraps the policies whose options carry
// proof_of_work, with those options, and only them.
func TestGating(t *testing.T) {
	pf, err := policy.Parse("test.yaml", []byte(`version: 1
policies:
  - {name: gated, routes: ["GET /a"], key: ip, strategy: gated-test, limit: 10, window: 1m, proof_of_work: {above: 5, bits: 4}}
  - {name: plain, routes: ["GET /a"], key: ip, strategy: gated-test, limit: 10, window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	build := func(p *policy.Policy) (edgelimit.Limiter, error) {
		return inners[0].new(t, &policy.Policy{Name: p.Name, Limit: p.Limit, Window: p.Window}, nil), nil
	}
	f := powgate.Gating(build, powgate.Config{Secrets: [][]byte{secret}})
	l, err := f(pf.Policies[0])
	if err != nil {
		t.Fatal(err)
	}
	g, ok := l.(*powgate.Gate)
	if !ok || g.Options() != (powgate.Options{Above: 5, Bits: 4, TTL: 10 * time.Second}) {
		t.Fatalf("gated policy: %T %+v, want a Gate with its options", l, l)
	}
	if l, err := f(pf.Policies[1]); err != nil || powgate.OptionsOf(pf.Policies[1]) != nil {
		t.Fatalf("plain policy: %T, %v", l, err)
	} else if _, gated := l.(*powgate.Gate); gated {
		t.Fatal("a policy without proof_of_work was gated")
	}
	if _, err := powgate.Gating(build, powgate.Config{})(pf.Policies[0]); !errors.Is(err, powgate.ErrConfig) {
		t.Fatalf("Gating without secrets: %v, want ErrConfig", err)
	}
}
