// Package policy reads the policy file: the strict policies.yaml that says
// which policies guard which routes, where each finds its client key, how it
// fails, its quota tiers and overrides, and the allow and deny lists. It is a
// leaf: it knows nothing of the engine that applies the file (package
// edgelimit) or of any strategy.
//
// [Load] and [Parse] return a [File] whose [Policy] values are complete
// (every optional field has its default), or every problem at once as
// [Errors], each naming the file, the line and the field, with a "did you
// mean" for a near miss.
//
// # Strategies own their options
//
// The parser reads the fields every policy has (name, routes, key, limit,
// window, cost, the failure mode, tiers, overrides, charging) and hands the
// rest of a policy's fields to its [Strategy], which a strategy package
// [Register]s from init: durablecounter, kvbucket, inflight and signedwindow
// each declare, validate and document their own fields through [Fields],
// with messages that point at the file's line. A Strategy also declares its
// limiters' optional [Abilities], so that a field needing one the strategy
// lacks (charge: response without a limiter that can charge) is refused
// here, at its line, not when the engine is built. A program parses the
// strategies it links, so a Lambda function links only the strategies its
// policy file uses.
package policy
