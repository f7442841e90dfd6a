package middleware

import (
	"encoding/json"
	"hash/maphash"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/edgelimit/edgelimit"
)

// equalFold compares header names, which are ASCII tokens, ignoring case.
func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// field returns the verdict field named like key, ignoring case.
func field(fs []edgelimit.Field, key string) (edgelimit.Field, bool) {
	for _, f := range fs {
		if equalFold(f.Name, key) {
			return f, true
		}
	}
	return edgelimit.Field{}, false
}

// replaced reports whether the handler's header key gives way to a verdict
// field: every field of the verdict (the RateLimit fields and the limiters'
// own, like Edgelimit-Token) replaces a header of the same name the handler
// set, in any case.
func replaced(fs []edgelimit.Field, key string) bool {
	_, ok := field(fs, key)
	return ok
}

// mapSize is the size of a copy of the handler's headers h with the
// verdict's fields in place of any of the same name: exact when the sum
// would pass one group of Go's map (8 entries), so that a copy that fits
// in one is made as one (a map's header and a single group), not as a
// table of groups.
func mapSize[V any](h map[string]V, fs []edgelimit.Field) int {
	n := len(h) + len(fs)
	if n <= 8 {
		return n
	}
	for k := range h {
		if replaced(fs, k) {
			n--
		}
	}
	return n
}

// withSingle returns a copy of the handler's headers h with the verdict's
// fields in place of any of the same name.
func withSingle(h map[string]string, fs []edgelimit.Field) map[string]string {
	if len(fs) == 0 {
		return h
	}
	out := make(map[string]string, mapSize(h, fs))
	for k, v := range h {
		if !replaced(fs, k) {
			out[k] = v
		}
	}
	for _, f := range fs {
		out[f.Name] = f.Value
	}
	return out
}

// withMulti is withSingle for a multi-value header map. values(i) is
// fs[i]'s value as a one-element slice, the verdict's own
// (Verdict.Values), which the response may keep: no slice is allocated.
func withMulti(h map[string][]string, fs []edgelimit.Field, values func(int) []string) map[string][]string {
	if len(fs) == 0 {
		return h
	}
	out := make(map[string][]string, mapSize(h, fs))
	for k, v := range h {
		if !replaced(fs, k) {
			out[k] = v
		}
	}
	for i, f := range fs {
		out[f.Name] = values(i)
	}
	return out
}

// withoutOurs returns h without the headers the verdict replaces: the
// single-value map beside a multi-value one we write to. It copies h only if
// there is something to remove.
func withoutOurs(h map[string]string, fs []edgelimit.Field) map[string]string {
	n := 0
	for k := range h {
		if replaced(fs, k) {
			n++
		}
	}
	if n == 0 {
		return h
	}
	out := make(map[string]string, len(h)-n)
	for k, v := range h {
		if !replaced(fs, k) {
			out[k] = v
		}
	}
	return out
}

// singleOf renders the verdict's fields as a single-value header map.
func singleOf(fs []edgelimit.Field) map[string]string {
	h := make(map[string]string, len(fs))
	for _, f := range fs {
		h[f.Name] = f.Value
	}
	return h
}

// multiOf renders the verdict's fields as a multi-value header map, each
// value the verdict's own one-element slice (values, as in withMulti).
func multiOf(fs []edgelimit.Field, values func(int) []string) map[string][]string {
	h := make(map[string][]string, len(fs))
	for i, f := range fs {
		h[f.Name] = values(i)
	}
	return h
}

// lambdaBody is the verdict's problem body as a Lambda response's Body,
// which the runtime serializes after the adapter has released the verdict
// (whose body buffer is reused): a string of its own, but one interned in
// bodies, so that a body like one sent recently (a flood's 429s: the same
// policy, the same wait) is that string again, not a new one.
func lambdaBody(v *edgelimit.Verdict) string {
	if len(v.Body) == 0 {
		return body(v)
	}
	return bodies.intern(v.Body)
}

// bodies interns the Lambda adapters' problem bodies.
var bodies = newBodyCache()

// bodyCache is a small direct-mapped cache of strings, safe for
// concurrent use: a slot holds the last string whose hash fell in it.
// It holds at most len(slots) bodies (each a few hundred bytes: the
// engine's bodies are bounded by its policies' names and details).
type bodyCache struct {
	seed  maphash.Seed
	slots [256]atomic.Pointer[interned]
}

// interned is a string a bodyCache slot holds.
type interned struct{ s string }

func newBodyCache() *bodyCache { return &bodyCache{seed: maphash.MakeSeed()} }

// intern returns b as a string, the cached one if a slot holds it.
func (c *bodyCache) intern(b []byte) string {
	slot := &c.slots[maphash.Bytes(c.seed, b)%uint64(len(c.slots))]
	if e := slot.Load(); e != nil && e.s == string(b) {
		return e.s
	}
	e := &interned{s: string(b)}
	slot.Store(e)
	return e.s
}

// body returns the verdict's problem body as response text. A verdict that
// denies without a body (which the engine does not produce) still gets a
// valid problem document.
func body(v *edgelimit.Verdict) string {
	if len(v.Body) > 0 {
		return string(v.Body)
	}
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}{"about:blank", http.StatusText(v.Status), v.Status})
	return string(b)
}

// status returns the verdict's status, never 0 for a verdict that denies.
func status(v *edgelimit.Verdict) int {
	if v.Status == 0 {
		return http.StatusBadRequest
	}
	return v.Status
}

// statusDescription is the ALB's status line text, like "429 Too Many
// Requests": a constant for the statuses the engine answers.
func statusDescription(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "400 Bad Request"
	case http.StatusForbidden:
		return "403 Forbidden"
	case http.StatusTooManyRequests:
		return "429 Too Many Requests"
	case http.StatusServiceUnavailable:
		return "503 Service Unavailable"
	}
	return strconv.Itoa(code) + " " + http.StatusText(code)
}

// rightmost returns the last entry of a comma-separated header list.
func rightmost(list string) string {
	if i := strings.LastIndexByte(list, ','); i >= 0 {
		list = list[i+1:]
	}
	return strings.TrimSpace(list)
}
