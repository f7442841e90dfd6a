package edgelimit

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgelimit/edgelimit/internal/jsonenc"
)

// Problem types (RFC 9457) used in bodies.
const (
	ProblemQuotaExceeded    = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemReducedCapacity  = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	ProblemBadRequest       = "about:blank"
	ContentTypeProblemJSON  = "application/problem+json"
	titleQuotaExceeded      = "Request cannot be satisfied as assigned quota has been exceeded"
	titleReducedCapacity    = "Request cannot be satisfied due to temporary reduced capacity"
	titleBadRequest         = "Bad Request"
	detailProofOfWorkNeeded = "Solve the proof-of-work challenge and retry with the Edgelimit-Proof header."
)

// Problem is an RFC 9457 problem details body as edgelimit sends it.
type Problem struct {
	Type             string     `json:"type"`
	Title            string     `json:"title"`
	Status           int        `json:"status"`
	Detail           string     `json:"detail,omitempty"`
	ViolatedPolicies []string   `json:"violated-policies,omitempty"`
	RetryAfter       int64      `json:"retry-after,omitempty"`
	Challenge        *Challenge `json:"challenge,omitempty"`
}

// Seconds rounds d up to whole seconds, as RateLimit and X-RateLimit-Reset
// carry it.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// RetryAfterSeconds rounds d up to whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(1, Seconds(d))
}

func (e *Engine) badRequest(v *Verdict, detail string) {
	v.Allowed = false
	v.Status = 400
	v.Body = problemJSON(&Problem{Type: ProblemBadRequest, Title: titleBadRequest, Status: 400, Detail: detail})
	v.add(HeaderContentType, ContentTypeProblemJSON)
}

func (e *Engine) render(rs *routeSet, v *Verdict, out []outcome, blocked bool) {
	// Every computed header value is appended to one buffer, which becomes
	// one string that the values are sliced from: one allocation for all.
	// RateLimit lists every non-shadow policy that was evaluated.
	var stack [192]byte
	rl := stack[:0]
	var legacy *Decision
	var legacyLimit string
	var retry time.Duration
	var violatedBuf, failedBuf [8]string
	violated, failed := violatedBuf[:0], failedBuf[:0]
	var challenge *Challenge
	var tokens []string
	for _, c := range rs.policies {
		if c.Shadow || out[c.slot] == notEvaluated && v.Decisions[c.slot].Policy == "" {
			continue
		}
		d := &v.Decisions[c.slot]
		if len(rl) > 0 {
			rl = append(rl, ", "...)
		}
		rl = append(rl, c.rItem...)
		rl = strconv.AppendInt(rl, max(d.Remaining, 0), 10)
		rl = append(rl, ";t="...)
		rl = strconv.AppendInt(rl, Seconds(d.Reset), 10)
		if legacy == nil || d.Remaining < legacy.Remaining || d.Remaining == legacy.Remaining && d.Reset > legacy.Reset {
			legacy, legacyLimit = d, c.limitStr
		}
		switch out[c.slot] {
		case denied:
			violated = append(violated, c.Name)
			retry = max(retry, d.RetryAfter)
		case failedClosed:
			failed = append(failed, c.Name)
			retry = max(retry, d.RetryAfter)
		}
		if d.Challenge != nil && challenge == nil {
			challenge = d.Challenge
		}
		if d.Token != "" {
			tokens = append(tokens, d.Token)
		}
	}
	buf, rlEnd := rl, len(rl)
	var remEnd, resetEnd int
	if e.legacy && legacy != nil {
		buf = strconv.AppendInt(buf, max(legacy.Remaining, 0), 10)
		remEnd = len(buf)
		buf = strconv.AppendInt(buf, Seconds(legacy.Reset), 10)
		resetEnd = len(buf)
	}
	var secs int64
	if blocked {
		secs = RetryAfterSeconds(retry)
		buf = strconv.AppendInt(buf, secs, 10)
	}
	vals := string(buf)
	if rs.policyHeader != "" {
		v.add(HeaderRateLimitPolicy, rs.policyHeader)
	}
	if rlEnd > 0 {
		v.add(HeaderRateLimit, vals[:rlEnd])
	}
	if e.legacy && legacy != nil {
		v.add(HeaderLegacyLimit, legacyLimit)
		v.add(HeaderLegacyRemaining, vals[rlEnd:remEnd])
		v.add(HeaderLegacyReset, vals[remEnd:resetEnd])
	}
	if !blocked {
		v.Allowed = true
		if len(tokens) > 0 {
			v.add(HeaderToken, strings.Join(tokens, ", "))
		}
		return
	}
	v.Allowed = false
	v.add(HeaderRetryAfter, vals[max(rlEnd, resetEnd):])
	v.add(HeaderContentType, ContentTypeProblemJSON)
	var detail [256]byte
	if len(failed) > 0 && len(violated) == 0 {
		v.Status = 503
		d := append(detail[:0], "The rate-limit store is unavailable and this endpoint fails closed. Retry in "...)
		d = appendPlural(d, secs, "second")
		d = append(d, '.')
		v.Body = appendProblem(make([]byte, 0, 384), &Problem{
			Type: ProblemReducedCapacity, Title: titleReducedCapacity, Status: 503,
			ViolatedPolicies: failed, RetryAfter: secs,
		}, d)
		return
	}
	v.Status = 429
	if challenge != nil {
		v.add(HeaderChallenge, challenge.Value)
		v.Body = mustJSON(Problem{Type: ProblemQuotaExceeded, Title: titleQuotaExceeded, Status: 429,
			Detail: detailProofOfWorkNeeded, ViolatedPolicies: slices.Clone(violated), RetryAfter: secs, Challenge: challenge})
		return
	}
	d := append(detail[:0], "Quota exceeded for "...)
	d = appendQuoteList(d, violated)
	d = append(d, ". Retry in "...)
	d = appendPlural(d, secs, "second")
	d = append(d, '.')
	v.Body = appendProblem(make([]byte, 0, 384), &Problem{Type: ProblemQuotaExceeded, Title: titleQuotaExceeded, Status: 429,
		ViolatedPolicies: violated, RetryAfter: secs}, d)
}

// appendQuoteList appends `policy "a"` or `policies "a", "b"`.
func appendQuoteList(b []byte, names []string) []byte {
	if len(names) == 1 {
		return strconv.AppendQuote(append(b, "policy "...), names[0])
	}
	b = append(b, "policies "...)
	for i, n := range names {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, n)
	}
	return b
}

// appendPlural appends "1 second" or "n seconds".
func appendPlural(b []byte, n int64, unit string) []byte {
	b = strconv.AppendInt(b, n, 10)
	b = append(b, ' ')
	b = append(b, unit...)
	if n != 1 {
		b = append(b, 's')
	}
	return b
}

// problemJSON returns p as JSON, as encoding/json would write it.
func problemJSON(p *Problem) []byte {
	if p.Challenge != nil {
		return mustJSON(*p)
	}
	return appendProblem(make([]byte, 0, 384), p, nil)
}

// appendProblem appends p as JSON, byte for byte what encoding/json writes
// for it (same field order, omitempty and escaping), without reflection.
// detail, if not nil, is used in place of p.Detail. p.Challenge is not
// written: bodies with a challenge go through encoding/json.
func appendProblem(b []byte, p *Problem, detail []byte) []byte {
	b = append(b, `{"type":`...)
	b = jsonenc.AppendString(b, p.Type)
	b = append(b, `,"title":`...)
	b = jsonenc.AppendString(b, p.Title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(p.Status), 10)
	if detail != nil {
		if len(detail) > 0 {
			b = append(b, `,"detail":`...)
			b = jsonenc.AppendString(b, detail)
		}
	} else if p.Detail != "" {
		b = append(b, `,"detail":`...)
		b = jsonenc.AppendString(b, p.Detail)
	}
	if len(p.ViolatedPolicies) > 0 {
		b = append(b, `,"violated-policies":[`...)
		for i, n := range p.ViolatedPolicies {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.AppendString(b, n)
		}
		b = append(b, ']')
	}
	if p.RetryAfter != 0 {
		b = append(b, `,"retry-after":`...)
		b = strconv.AppendInt(b, p.RetryAfter, 10)
	}
	return append(b, '}')
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("edgelimit: marshal problem: " + err.Error()) // only fixed types are marshalled
	}
	return b
}
