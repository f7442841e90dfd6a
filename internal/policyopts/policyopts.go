// Package policyopts finds a strategy's options for a limiter's Config,
// the same way in every strategy package.
package policyopts

import (
	"fmt"

	"github.com/edgelimit/edgelimit/policy"
)

// Of returns the options of type T a limiter is built with: explicit when
// the Config gives them, else what the policy file's parser left in
// p.Options (the strategy's Parse), else T's zero value (the defaults). A
// policy whose Options are another strategy's is refused with an error
// wrapping errConfig (prefix, the package name, when errConfig is nil).
func Of[T any](explicit *T, p *policy.Policy, errConfig error, prefix string) (T, error) {
	var zero T
	switch {
	case explicit != nil:
		return *explicit, nil
	case p.Options == nil:
		return zero, nil
	}
	o, ok := p.Options.(*T)
	if !ok {
		msg := fmt.Sprintf("policy %q: options are a %T, not %T (the policy's strategy is %q)", p.Name, p.Options, o, p.StrategyName())
		if errConfig != nil {
			return zero, fmt.Errorf("%w: %s", errConfig, msg)
		}
		return zero, fmt.Errorf("%s: %s", prefix, msg)
	}
	return *o, nil
}
