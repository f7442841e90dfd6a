package client

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Bounds on what a Jar keeps and sends: the server ignores an
// Edgelimit-Token header longer than 4 KiB, and tries at most 8 tokens.
const (
	maxTokensPerOrigin = 8
	maxTokenHeader     = 4096
)

// Jar keeps window tokens (Edgelimit-Token) per origin (scheme://host:port)
// and, within an origin, per policy: a token names its policy in its "aud"
// claim, which the client reads without verifying (only the server can).
// A request to an origin carries every unexpired token the jar holds for
// it; each policy on the server picks its own, so one token serves every
// route its policy guards. A Jar is safe for concurrent use, and can be
// saved and restored with encoding/json.
type Jar struct {
	mu      sync.Mutex
	origins map[string]*originTokens
}

type originTokens struct {
	byPolicy map[string]jarToken
	order    []string // policies, least recently stored first
}

type jarToken struct {
	value string
	exp   time.Time // zero if unknown
}

// NewJar returns an empty jar.
func NewJar() *Jar { return &Jar{origins: make(map[string]*originTokens)} }

func origin(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}

// Header returns the Edgelimit-Token value for a request to u at now: the
// origin's unexpired tokens, newest first, joined by ", ", within 4 KiB.
func (j *Jar) Header(u *url.URL, now time.Time) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	o := j.origins[origin(u)]
	if o == nil {
		return ""
	}
	var b strings.Builder
	for i := len(o.order) - 1; i >= 0; i-- {
		t := o.byPolicy[o.order[i]]
		if !t.exp.IsZero() && !now.Before(t.exp) {
			continue
		}
		if b.Len()+len(t.value)+2 > maxTokenHeader {
			break
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t.value)
	}
	return b.String()
}

// Store records the tokens of a response's Edgelimit-Token header (one or
// several, comma-separated) for u's origin, replacing the tokens of the same
// policies, and drops expired ones.
func (j *Jar) Store(u *url.URL, header string, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	key := origin(u)
	o := j.origins[key]
	if o == nil {
		o = &originTokens{byPolicy: make(map[string]jarToken)}
		if j.origins == nil {
			j.origins = make(map[string]*originTokens)
		}
		j.origins[key] = o
	}
	for _, tok := range strings.Split(header, ",") {
		tok = strings.TrimSpace(tok)
		if tok == "" || len(tok) > maxTokenHeader {
			continue
		}
		policy, exp := peek(tok)
		o.put(policy, jarToken{value: tok, exp: exp})
	}
	for p, t := range o.byPolicy {
		if !t.exp.IsZero() && !now.Before(t.exp) {
			o.remove(p)
		}
	}
}

func (o *originTokens) put(policy string, t jarToken) {
	if _, ok := o.byPolicy[policy]; ok {
		o.remove(policy)
	}
	for len(o.order) >= maxTokensPerOrigin {
		o.remove(o.order[0])
	}
	o.byPolicy[policy] = t
	o.order = append(o.order, policy)
}

func (o *originTokens) remove(policy string) {
	delete(o.byPolicy, policy)
	for i, p := range o.order {
		if p == policy {
			o.order = append(o.order[:i], o.order[i+1:]...)
			break
		}
	}
}

// Forget drops every token of u's origin: the next request to a proof-of-work
// route there needs a new proof.
func (j *Jar) Forget(u *url.URL) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.origins, origin(u))
}

// peek reads the policy (aud) and expiry (exp) of a JWT without verifying
// it. A token it cannot read is kept under the policy "".
func peek(tok string) (string, time.Time) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", time.Time{}
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", time.Time{}
	}
	var c struct {
		Aud any   `json:"aud"`
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &c) != nil {
		return "", time.Time{}
	}
	var exp time.Time
	if c.Exp > 0 {
		exp = time.Unix(c.Exp, 0)
	}
	switch a := c.Aud.(type) {
	case string:
		return a, exp
	case []any:
		if len(a) == 1 {
			if s, ok := a[0].(string); ok {
				return s, exp
			}
		}
	}
	return "", exp
}

// MarshalJSON saves the jar as {"origin": ["token", ...]}.
func (j *Jar) MarshalJSON() ([]byte, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string][]string, len(j.origins))
	for k, o := range j.origins {
		for _, p := range o.order {
			out[k] = append(out[k], o.byPolicy[p].value)
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON restores a jar saved by MarshalJSON, adding to what it holds.
func (j *Jar) UnmarshalJSON(data []byte) error {
	var in map[string][]string
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	for k, toks := range in {
		u, err := url.Parse(k)
		if err != nil {
			continue
		}
		j.Store(u, strings.Join(toks, ","), time.Time{})
	}
	return nil
}
