package metrics

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/jsonenc"
)

// DefaultNamespace is EMFConfig.Namespace's default.
const DefaultNamespace = "edgelimit"

// Metric names written by EMF.
const (
	MetricAllowed      = "Allowed"
	MetricDenied       = "Denied"
	MetricShadowDenied = "ShadowDenied"
	MetricDegraded     = "Degraded"
	MetricStoreErrors  = "StoreErrors"
	MetricRefunded     = "Refunded"
	MetricRefundFailed = "RefundFailed"
	MetricStoreLatency = "StoreLatency"
	// MetricDelayed and MetricWaitTime are on the lines of a policy that
	// held its request for a later turn (max_delay), and only there: 1,
	// and how long the request waited, in milliseconds (served after it,
	// or denied when the wait was cut short: Reason "wait-cut").
	MetricDelayed  = "Delayed"
	MetricWaitTime = "WaitTime"
	// MetricOverrideErrors counts the decisions whose override read failed
	// (edgelimit.Event.OverrideError): on_store_error decided them, as a
	// store failure, unless the policy fails open with an override the
	// instance knew.
	MetricOverrideErrors = "OverrideErrors"
)

// Metric names of the lines ObserveBreaker writes, one per change of a
// store's circuit breaker: each counts the changes into its state.
const (
	MetricBreakerOpen     = "BreakerOpen"
	MetricBreakerHalfOpen = "BreakerHalfOpen"
	MetricBreakerClosed   = "BreakerClosed"
)

// Dimension and property names written by EMF.
const (
	DimensionPolicy  = "Policy"
	DimensionRoute   = "Route"
	PropertyFunction = "Function"
	PropertyStrategy = "Strategy"
	// PropertyReason says why a decision was not made by counting at
	// request time (edgelimit.Event.Reason): allow-list, deny-list,
	// after-response, degraded, breaker-open, soft-threshold,
	// proof-of-work. Absent otherwise.
	PropertyReason = "Reason"
	// PropertyRequestID is the Lambda request id of the decision's request
	// (from lambdacontext in edgelimit.Event.Context), under the key the
	// log lines use (KeyRequestID), so one Logs Insights filter finds a
	// request's metric lines and its logs. Absent outside Lambda.
	PropertyRequestID = KeyRequestID
	// PropertyKeyHash is the decision's hashed client key
	// (edgelimit.Event.Key, the hash a store keeps), never the raw key.
	// A property, not a dimension: a dimension makes a metric of each of
	// its values, and CloudWatch bills each metric, so one per client
	// would cost per client. As a property it is only in the log line,
	// where a Contributor Insights rule (template.yaml's
	// TopDeniedKeysRule) or `edgelimit top` ranks the keys.
	// Absent for a list's decision, which has no hashed key.
	PropertyKeyHash = "KeyHash"
	// DimensionStore names the store of a breaker line
	// (edgelimit.BreakerEvent.Store).
	DimensionStore = "Store"
	// PropertyState, PropertyPolicies and PropertyFailures are a breaker
	// line's new state, the policies on the store (comma separated) and,
	// when it opens, how many calls in a row had failed.
	PropertyState    = "State"
	PropertyPolicies = "Policies"
	PropertyFailures = "Failures"
)

// Limits of the EMF specification and of CloudWatch that EMF enforces.
const (
	// MaxNamespaceLength is the longest namespace CloudWatch accepts.
	MaxNamespaceLength = 255
	// MaxDimensionValueLength is the longest dimension value CloudWatch
	// accepts; longer values are cut (at a UTF-8 boundary).
	MaxDimensionValueLength = 1024
)

// noValue replaces an empty dimension value, which CloudWatch rejects.
const noValue = "(none)"

// EMFConfig configures an EMF observer.
type EMFConfig struct {
	// Writer receives one JSON line per decision; default os.Stdout, which
	// Lambda ships to CloudWatch Logs.
	Writer io.Writer
	// Namespace is the CloudWatch metric namespace; default "edgelimit".
	// 1 to 255 characters, not starting with ':' and not "AWS/...".
	Namespace string
	// Function is written as the Function property of every line; default
	// none. FromEnv sets it to the Lambda function's name.
	Function string
	// Now stamps each line (_aws.Timestamp); default time.Now.
	Now func() time.Time
	// OnError, if set, is called when a write fails. A failed metric line
	// never fails the request; default: ignore.
	OnError func(error)
}

// EMF writes CloudWatch Embedded Metric Format lines, one per policy
// decision. Its Observe method is an edgelimit.Config.Observe hook. An EMF
// is safe for concurrent use.
type EMF struct {
	w       io.Writer
	now     func() time.Time
	onError func(error)
	// directive follows the timestamp: it closes _aws and opens the
	// properties, `,"CloudWatchMetrics":[...]},`.
	directive []byte
	// breakerDirective is directive for the breaker lines.
	breakerDirective []byte
	function         []byte // `"Function":"name",` or empty
	mu               sync.Mutex
	buf              []byte
	// delayDirective is directive with Delayed and WaitTime, for the lines
	// of a request that waited (max_delay).
	delayDirective []byte
}

// NewEMF validates cfg and returns an EMF.
func NewEMF(cfg EMFConfig) (*EMF, error) {
	ns := cfg.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	if err := checkNamespace(ns); err != nil {
		return nil, err
	}
	m := &EMF{w: cfg.Writer, now: cfg.Now, onError: cfg.OnError}
	if m.w == nil {
		m.w = os.Stdout
	}
	if m.now == nil {
		m.now = time.Now
	}
	d := []byte(`,"CloudWatchMetrics":[{"Namespace":`)
	d = jsonenc.AppendString(d, ns)
	d = append(d, `,"Dimensions":[["`+DimensionPolicy+`","`+DimensionRoute+`"]],"Metrics":[`+
		`{"Name":"`+MetricAllowed+`","Unit":"Count"},`+
		`{"Name":"`+MetricDenied+`","Unit":"Count"},`+
		`{"Name":"`+MetricShadowDenied+`","Unit":"Count"},`+
		`{"Name":"`+MetricDegraded+`","Unit":"Count"},`+
		`{"Name":"`+MetricStoreErrors+`","Unit":"Count"},`+
		`{"Name":"`+MetricRefunded+`","Unit":"Count"},`+
		`{"Name":"`+MetricRefundFailed+`","Unit":"Count"},`+
		`{"Name":"`+MetricOverrideErrors+`","Unit":"Count"},`+
		`{"Name":"`+MetricStoreLatency+`","Unit":"Milliseconds"}]}]},`...)
	m.directive = d
	m.delayDirective = append(append(d[:len(d)-len(`]}]},`):len(d)-len(`]}]},`)],
		`,{"Name":"`+MetricDelayed+`","Unit":"Count"},{"Name":"`+MetricWaitTime+`","Unit":"Milliseconds"}`...), `]}]},`...)
	bd := []byte(`,"CloudWatchMetrics":[{"Namespace":`)
	bd = jsonenc.AppendString(bd, ns)
	bd = append(bd, `,"Dimensions":[["`+DimensionStore+`"]],"Metrics":[`+
		`{"Name":"`+MetricBreakerOpen+`","Unit":"Count"},`+
		`{"Name":"`+MetricBreakerHalfOpen+`","Unit":"Count"},`+
		`{"Name":"`+MetricBreakerClosed+`","Unit":"Count"}]}]},`...)
	m.breakerDirective = bd
	if cfg.Function != "" {
		m.function = jsonenc.AppendString([]byte(`"`+PropertyFunction+`":`), cfg.Function)
		m.function = append(m.function, ',')
	}
	return m, nil
}

func checkNamespace(ns string) error {
	switch {
	case len(ns) > MaxNamespaceLength:
		return fmt.Errorf("metrics: namespace is %d bytes, more than %d", len(ns), MaxNamespaceLength)
	case !utf8.ValidString(ns):
		return errors.New("metrics: namespace is not UTF-8")
	case ns[0] == ':':
		return fmt.Errorf("metrics: namespace %q must not start with ':'", ns)
	case len(ns) >= 4 && ns[:4] == "AWS/":
		return fmt.Errorf("metrics: namespace %q is reserved for AWS services", ns)
	}
	for _, r := range ns {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("metrics: namespace %q contains a control character", ns)
		}
	}
	return nil
}

// Observe writes the line for one decision. It is an
// edgelimit.Config.Observe hook.
func (m *EMF) Observe(ev edgelimit.Event) {
	m.mu.Lock()
	b := m.AppendLine(m.buf[:0], ev)
	_, err := m.w.Write(b)
	m.buf = b
	m.mu.Unlock()
	if err != nil && m.onError != nil {
		m.onError(fmt.Errorf("metrics: write EMF line: %w", err))
	}
}

// AppendLine appends the EMF line for ev, newline included, to b.
func (m *EMF) AppendLine(b []byte, ev edgelimit.Event) []byte {
	b = append(b, `{"_aws":{"Timestamp":`...)
	b = strconv.AppendInt(b, m.now().UnixMilli(), 10)
	delayed := ev.Wait > 0 || ev.Reason == "wait-cut"
	if delayed {
		b = append(b, m.delayDirective...)
	} else {
		b = append(b, m.directive...)
	}
	b = append(b, `"`+DimensionPolicy+`":`...)
	b = jsonenc.AppendString(b, dimension(ev.Policy))
	b = append(b, `,"`+DimensionRoute+`":`...)
	b = jsonenc.AppendString(b, dimension(ev.Route))
	b = append(b, ',')
	b = append(b, m.function...)
	if ev.Strategy != "" {
		b = append(b, `"`+PropertyStrategy+`":`...)
		b = jsonenc.AppendString(b, ev.Strategy)
		b = append(b, ',')
	}
	if ev.Reason != "" {
		b = append(b, `"`+PropertyReason+`":`...)
		b = jsonenc.AppendString(b, ev.Reason)
		b = append(b, ',')
	}
	if ev.Context != nil {
		if lc, ok := lambdacontext.FromContext(ev.Context); ok && lc.AwsRequestID != "" {
			b = append(b, `"`+PropertyRequestID+`":`...)
			b = jsonenc.AppendString(b, lc.AwsRequestID)
			b = append(b, ',')
		}
	}
	if ev.Key != "" {
		b = append(b, `"`+PropertyKeyHash+`":`...)
		b = jsonenc.AppendString(b, ev.Key)
		b = append(b, ',')
	}
	// Allowed counts what the policy let through: not a decision another
	// policy's denial undid (Refunded), nor a peek. Denied counts every
	// violation the client was told of, peeked ones included.
	// A peek that failed decided nothing.
	allowed := ev.Allowed && !ev.Refunded && !ev.Peeked
	denied := !ev.Allowed && !ev.Shadow && !(ev.Peeked && ev.StoreError != nil)
	shadowDenied := !ev.Allowed && ev.Shadow
	b = appendCount(b, MetricAllowed, allowed)
	b = appendCount(b, MetricDenied, denied)
	b = appendCount(b, MetricShadowDenied, shadowDenied)
	b = appendCount(b, MetricDegraded, ev.Degraded)
	b = appendCount(b, MetricStoreErrors, ev.StoreError != nil)
	b = appendCount(b, MetricRefunded, ev.Refunded && ev.RefundError == nil)
	b = appendCount(b, MetricRefundFailed, ev.RefundError != nil)
	b = appendCount(b, MetricOverrideErrors, ev.OverrideError != nil)
	b = append(b, `"`+MetricStoreLatency+`":`...)
	lat := max(ev.Latency, 0)
	b = strconv.AppendFloat(b, float64(lat.Microseconds())/1000, 'f', -1, 64)
	if delayed {
		b = append(b, `,"`+MetricDelayed+`":1,"`+MetricWaitTime+`":`...)
		b = strconv.AppendFloat(b, float64(max(ev.Wait, 0).Microseconds())/1000, 'f', -1, 64)
	}
	return append(b, "}\n"...)
}

// ObserveBreaker writes the line for a change of a store's circuit
// breaker: the metrics BreakerOpen, BreakerHalfOpen and BreakerClosed
// (1 for the state it changed to) with the dimension Store, and the
// properties State, Policies, Failures (when it opens), Function and the
// request id. It is an edgelimit.Config.ObserveBreaker hook: alarm on the
// Sum of BreakerOpen to hear of a store that stopped answering.
func (m *EMF) ObserveBreaker(ev edgelimit.BreakerEvent) {
	m.mu.Lock()
	b := m.AppendBreakerLine(m.buf[:0], ev)
	_, err := m.w.Write(b)
	m.buf = b
	m.mu.Unlock()
	if err != nil && m.onError != nil {
		m.onError(fmt.Errorf("metrics: write EMF line: %w", err))
	}
}

// AppendBreakerLine appends the EMF line for ev, newline included, to b.
func (m *EMF) AppendBreakerLine(b []byte, ev edgelimit.BreakerEvent) []byte {
	b = append(b, `{"_aws":{"Timestamp":`...)
	b = strconv.AppendInt(b, m.now().UnixMilli(), 10)
	b = append(b, m.breakerDirective...)
	b = append(b, `"`+DimensionStore+`":`...)
	b = jsonenc.AppendString(b, dimension(ev.Store))
	b = append(b, ',')
	b = append(b, m.function...)
	b = append(b, `"`+PropertyState+`":`...)
	b = jsonenc.AppendString(b, ev.State.String())
	b = append(b, `,"`+PropertyPolicies+`":`...)
	b = jsonenc.AppendString(b, strings.Join(ev.Policies, ","))
	b = append(b, ',')
	if ev.Failures > 0 {
		b = append(b, `"`+PropertyFailures+`":`...)
		b = strconv.AppendInt(b, int64(ev.Failures), 10)
		b = append(b, ',')
	}
	if ev.Context != nil {
		if lc, ok := lambdacontext.FromContext(ev.Context); ok && lc.AwsRequestID != "" {
			b = append(b, `"`+PropertyRequestID+`":`...)
			b = jsonenc.AppendString(b, lc.AwsRequestID)
			b = append(b, ',')
		}
	}
	b = appendCount(b, MetricBreakerOpen, ev.State == edgelimit.BreakerOpen)
	b = appendCount(b, MetricBreakerHalfOpen, ev.State == edgelimit.BreakerHalfOpen)
	b = appendCount(b, MetricBreakerClosed, ev.State == edgelimit.BreakerClosed)
	b = b[:len(b)-1] // the last comma
	return append(b, "}\n"...)
}

// appendCount appends `"name":1,` or `"name":0,`.
func appendCount(b []byte, name string, v bool) []byte {
	b = append(b, '"')
	b = append(b, name...)
	if v {
		return append(b, `":1,`...)
	}
	return append(b, `":0,`...)
}

// dimension makes s a valid dimension value: not empty, at most
// MaxDimensionValueLength bytes of UTF-8.
func dimension(s string) string {
	if s == "" {
		return noValue
	}
	if len(s) > MaxDimensionValueLength {
		s = s[:MaxDimensionValueLength]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}
