package policy

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// validName replaced the regexp that every cold start compiled at package
// init; it must accept exactly what the regexp accepted.
func TestValidNameIsTheRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$`)
	cases := []string{"", "a", "-", "a-", "-a", "a-b", "paid", "tier-1", "Paid", "a_b", "a b", "é", "a\n", "0", "--", "a--b",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65), "a" + strings.Repeat("-", 62) + "b", "a" + strings.Repeat("-", 63) + "b"}
	// Every string of up to three characters over an alphabet with each
	// class the rule distinguishes.
	const alphabet = "az09-A_."
	var walk func(string)
	walk = func(s string) {
		cases = append(cases, s)
		if len(s) < 3 {
			for _, c := range alphabet {
				walk(s + string(c))
			}
		}
	}
	walk("")
	for _, s := range cases {
		if got, want := validName(s), re.MatchString(s); got != want {
			t.Errorf("validName(%q) = %v, the regexp says %v", s, got, want)
		}
	}
}

// syntaxError's "line N: " parsing, by hand since it replaced a regexp.
func TestSyntaxErrorLinePrefix(t *testing.T) {
	for _, tc := range []struct {
		err, msg string
		line     int
	}{
		{"yaml: line 12: did not find expected key", "did not find expected key", 12},
		{"yaml: line 3: found character that cannot start any token", "found character that cannot start any token", 3},
		{"yaml: line x: odd", "line x: odd", 0},
		{"yaml: line 4 odd", "line 4 odd", 0},
		{"yaml: control characters are not allowed", "control characters are not allowed", 0},
	} {
		// Past maxLocateLines: the library's line stands, no re-parse.
		line, msg := syntaxError([]byte(strings.Repeat("\n", maxLocateLines+1)), errors.New(tc.err))
		if msg != tc.msg || line != tc.line {
			t.Errorf("%q: line %d, message %q; want %d, %q", tc.err, line, msg, tc.line, tc.msg)
		}
	}
}
