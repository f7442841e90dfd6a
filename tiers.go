package edgelimit

import (
	"errors"
	"strconv"
	"strings"

	"github.com/edgelimit/edgelimit/policy"
)

// errUnknownTier is the private cause of a 400 for a tier the policy does
// not have (tiers.on_unknown: reject).
var errUnknownTier = errors.New("edgelimit: tier not known")

// tier returns the limits of the tier that in names for p, or a 400's
// cause.
func tier(p *policy.Policy, in *Input) (policy.Limits, error) {
	t := p.Tiers
	var v string
	switch t.By.Kind() {
	case policy.KeyHeader:
		if in.Header != nil {
			v = in.Header.Get(t.By.Name())
		}
	case policy.KeyClaim:
		if in.Claims != nil {
			v = in.Claims.Get(t.By.Name())
		}
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return t.Levels[t.Default], nil
	}
	if l, ok := t.Levels[v]; ok {
		return l, nil
	}
	if t.RejectUnknown {
		return policy.Limits{}, errUnknownTier
	}
	return t.Levels[t.Default], nil
}

// unknownTierDetail is the public detail of that 400: what is required,
// never what was sent (unless it is one of the known names).
func unknownTierDetail(p *policy.Policy) string {
	what := "header " + p.Tiers.By.Name()
	if p.Tiers.By.Kind() == policy.KeyClaim {
		what = "claim " + strconv.Quote(p.Tiers.By.Name())
	}
	return "The " + what + " must name one of the plans " + strings.Join(p.Tiers.Names, ", ") + "."
}
