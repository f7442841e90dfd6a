// Package metrics makes edgelimit observable on AWS Lambda without an agent
// or a metrics client: CloudWatch Embedded Metric Format (EMF) lines on
// standard output, and JSON logs that carry the Lambda request id.
//
// # Metrics
//
// [EMF] is an edgelimit.Config.Observe hook. For every policy decision it
// writes one JSON line that CloudWatch Logs turns into metrics in the
// configured namespace (default "edgelimit"), with the dimensions Policy and
// Route:
//
//   - Allowed: 1 when the policy let the request through (also when a store
//     failure was answered by on_store_error: allow).
//   - Denied: 1 when the policy blocked the request (429 for a denial, 503
//     for a fail-closed store failure).
//   - ShadowDenied: 1 when a shadow policy would have blocked the request;
//     shadow policies never block, so they never count in Denied.
//   - Degraded: 1 when the store failed (error or time budget) and the
//     policy's on_store_error decided instead of the count.
//   - OverrideErrors: 1 when the policy's override read failed (a policy
//     with overrides: true): on_store_error decided, as for a store failure
//     (unless the policy fails open and the instance knew the key's
//     override, which then applied).
//   - StoreLatency: how long the limiter took, in milliseconds (microsecond
//     precision). Near 0 for storage-free strategies and cache hits.
//
// The line of a policy that held its request for a later turn (max_delay)
// also declares and carries Delayed (1) and WaitTime (how long the request
// waited, in milliseconds); a wait cut short is a Denied line with Reason
// "wait-cut". Other lines have neither, so the Sum of Delayed counts the
// requests that waited.
//
// Every line carries all these values, zeros included, so the Sum of a metric
// is its count, SampleCount is the number of decisions, and an alarm on
// Denied or Degraded never sees missing data while traffic flows. Function
// and Strategy are written as plain properties (searchable with CloudWatch
// Logs Insights, not dimensions, so they cost nothing extra), and so is
// the Lambda request id ("requestId", as in the log lines), so that a
// request's metric lines and its logs are found with one filter. So is
// the client's key, hashed ("KeyHash", edgelimit.Event.Key: the hash a
// store keeps, never the raw key): a property, because a dimension would
// make a metric of every client; template.yaml's Contributor Insights
// rule and `edgelimit top` rank the keys with the most denials from it.
//
// [EMF.ObserveBreaker] is an edgelimit.Config.ObserveBreaker hook: when a
// store's circuit breaker changes state it writes one line with the
// dimension Store (the store's name, "durable" for the durable policies'
// table) and the counts BreakerOpen, BreakerHalfOpen and BreakerClosed, 1
// for the state it changed to; its properties State, Policies and, when it
// opens, Failures say more. An alarm on the Sum of BreakerOpen hears of a
// store that stopped answering. While a breaker is open, the decision
// lines of its policies carry Reason "breaker-open" and Degraded 1, and no
// StoreErrors: the store was not asked.
//
// A line is written with one Write call, so lines from concurrent decisions
// never interleave. Writing to standard output costs no network call: the
// Lambda runtime ships it with the function's other logs.
//
// # Logs
//
// [NewLogHandler] wraps any slog.Handler and adds the Lambda request id
// (from lambdacontext in the record's context) as "requestId", the key
// Lambda's own JSON log format uses, so a log line and the platform's
// START/REPORT lines of the same invocation can be joined. [NewLogger]
// builds the JSON logger the example functions use: Lambda's key names
// ("timestamp", "level", "message"), the request id, and a level filter.
package metrics
