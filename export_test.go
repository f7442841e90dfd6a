package edgelimit

import "net/netip"

// Internals the external tests reach.
var (
	CanonicalPath = canonicalPath
	TemplatePath  = templatePath
)

// NewCIDRSet builds a list's address set from CIDRs and addresses, and
// returns its membership test.
func NewCIDRSet(values []string) func(netip.Addr) bool {
	var pfxs []netip.Prefix
	for _, v := range values {
		p, err := parseCIDR(v)
		if err != nil {
			panic(err)
		}
		pfxs = append(pfxs, p)
	}
	return newCIDRSet(pfxs).contains
}

// Parsers the tests check directly.
var (
	ParseDuration  = parseDuration
	FormatDuration = formatDuration
	ParseRoute     = parseRoute
)
