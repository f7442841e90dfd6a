package edgelimit

import (
	"strconv"
	"time"
)

// The response fields follow draft-ietf-httpapi-ratelimit-headers-11
// (RateLimit-Policy and RateLimit, Structured Field lists) and RFC 9457
// problem details with the draft's problem types. Everything that depends
// on the draft's revision is in this file.

// Header names edgelimit writes.
const (
	headerRateLimitPolicy = "RateLimit-Policy"
	headerRateLimit       = "RateLimit"
	headerRetryAfter      = "Retry-After"
	headerLegacyLimit     = "X-RateLimit-Limit"
	headerLegacyRemaining = "X-RateLimit-Remaining"
	headerLegacyReset     = "X-RateLimit-Reset"
	headerContentType     = "Content-Type"
)

// Problem types (draft-11 §5, RFC 9457) used in bodies.
const (
	problemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	problemBadRequest      = "about:blank"
	contentTypeProblemJSON = "application/problem+json"
	// The titles are the draft's (§5.1, §5.2).
	titleQuotaExceeded   = "Request cannot be satisfied as assigned quota has been exceeded"
	titleReducedCapacity = "Request cannot be satisfied due to temporary server capacity constraints"
	titleBadRequest      = "Bad Request"
	titleForbidden       = "Forbidden"
)

// policyItem is a RateLimit-Policy list member: "name";q=Q;w=W (§3.1; w is
// whole seconds, rounded up, at least 1).
func policyItem(name string, q int64, w time.Duration) string {
	b := strconv.AppendQuote(make([]byte, 0, len(name)+24), name)
	return string(appendPolicyParams(b, q, w))
}

func appendPolicyParams(b []byte, q int64, w time.Duration) []byte {
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, max(q, 0), 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, max(seconds(w), 1), 10)
}

// appendLimitItemSpans appends a RateLimit list member (§4.1): rItem is
// `"name";r=`, then the available quota and, when the limiter gave one, the
// effective window t in whole seconds, rounded up. It returns where in b
// the digits of r and of t are (t's [0, 0] when omitted).
func appendLimitItemSpans(b []byte, rItem string, r int64, t time.Duration) (out []byte, rSpan, tSpan [2]int) {
	b = append(b, rItem...)
	rSpan[0] = len(b)
	b = strconv.AppendInt(b, max(r, 0), 10)
	rSpan[1] = len(b)
	if t > 0 {
		b = append(b, ";t="...)
		tSpan[0] = len(b)
		b = strconv.AppendInt(b, seconds(t), 10)
		tSpan[1] = len(b)
	}
	return b, rSpan, tSpan
}

// appendListSep separates list members (§3.1 of RFC 9651 allows optional
// white space; edgelimit writes ", ").
func appendListSep(b []byte) []byte {
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	return b
}

// Seconds rounds d up to whole seconds, as RateLimit and X-RateLimit-Reset
// carry it.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, seconds(d))
}
