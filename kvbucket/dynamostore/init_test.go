package dynamostore

import (
	"regexp"
	"strings"
	"testing"
)

// validRegion replaced a regexp compiled at every cold start's package
// init; it must accept exactly what the regexp accepted.
func TestValidRegionIsTheRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	cases := []string{"", "eu-west-1", "us_gov", "a.b", "a b", "é", "eu-west-1\n", strings.Repeat("a", 64), strings.Repeat("a", 65)}
	for _, c := range "azAZ09_-./ \x00" {
		cases = append(cases, string(c), "x"+string(c), string(c)+"x")
	}
	for _, s := range cases {
		if got, want := validRegion(s), re.MatchString(s); got != want {
			t.Errorf("validRegion(%q) = %v, the regexp says %v", s, got, want)
		}
	}
}
