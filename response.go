package edgelimit

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
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
	v.Body = mustJSON(Problem{Type: ProblemBadRequest, Title: titleBadRequest, Status: 400, Detail: detail})
	v.add(HeaderContentType, ContentTypeProblemJSON)
}

func (e *Engine) render(rs *routeSet, v *Verdict, out []outcome, blocked bool) {
	// RateLimit lists every non-shadow policy that was evaluated.
	var rl []byte
	var legacy *Decision
	var legacyLimit string
	var retry time.Duration
	var violated, failed []string
	var challenge *Challenge
	var tokens []string
	for _, c := range rs.policies {
		if c.Shadow || out[c.index] == notEvaluated && v.Decisions[c.index].Policy == "" {
			continue
		}
		d := &v.Decisions[c.index]
		if len(rl) > 0 {
			rl = append(rl, ", "...)
		}
		rl = strconv.AppendQuote(rl, c.Name)
		rl = append(rl, ";r="...)
		rl = strconv.AppendInt(rl, max(d.Remaining, 0), 10)
		rl = append(rl, ";t="...)
		rl = strconv.AppendInt(rl, Seconds(d.Reset), 10)
		if legacy == nil || d.Remaining < legacy.Remaining || d.Remaining == legacy.Remaining && d.Reset > legacy.Reset {
			legacy, legacyLimit = d, c.limitStr
		}
		switch out[c.index] {
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
	if rs.policyHeader != "" {
		v.add(HeaderRateLimitPolicy, rs.policyHeader)
	}
	if len(rl) > 0 {
		v.add(HeaderRateLimit, string(rl))
	}
	if e.legacy && legacy != nil {
		v.add(HeaderLegacyLimit, legacyLimit)
		v.add(HeaderLegacyRemaining, strconv.FormatInt(max(legacy.Remaining, 0), 10))
		v.add(HeaderLegacyReset, strconv.FormatInt(Seconds(legacy.Reset), 10))
	}
	if !blocked {
		v.Allowed = true
		if len(tokens) > 0 {
			v.add(HeaderToken, strings.Join(tokens, ", "))
		}
		return
	}
	v.Allowed = false
	secs := RetryAfterSeconds(retry)
	v.add(HeaderRetryAfter, strconv.FormatInt(secs, 10))
	v.add(HeaderContentType, ContentTypeProblemJSON)
	if len(failed) > 0 && len(violated) == 0 {
		v.Status = 503
		v.Body = mustJSON(Problem{
			Type: ProblemReducedCapacity, Title: titleReducedCapacity, Status: 503,
			Detail:           "The rate-limit store is unavailable and this endpoint fails closed. Retry in " + plural(secs, "second") + ".",
			ViolatedPolicies: failed, RetryAfter: secs,
		})
		return
	}
	v.Status = 429
	p := Problem{Type: ProblemQuotaExceeded, Title: titleQuotaExceeded, Status: 429, ViolatedPolicies: violated, RetryAfter: secs}
	if challenge != nil {
		v.add(HeaderChallenge, challenge.Value)
		p.Challenge = challenge
		p.Detail = detailProofOfWorkNeeded
	} else {
		p.Detail = "Quota exceeded for " + quoteList(violated) + ". Retry in " + plural(secs, "second") + "."
	}
	v.Body = mustJSON(p)
}

func quoteList(names []string) string {
	if len(names) == 1 {
		return "policy " + strconv.Quote(names[0])
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return "policies " + strings.Join(q, ", ")
}

func plural(n int64, unit string) string {
	s := strconv.FormatInt(n, 10) + " " + unit
	if n != 1 {
		s += "s"
	}
	return s
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("edgelimit: marshal problem: " + err.Error()) // only fixed types are marshalled
	}
	return b
}
