package middleware

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

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

// withSingle returns a copy of the handler's headers h with the verdict's
// fields in place of any of the same name.
func withSingle(h map[string]string, fs []edgelimit.Field) map[string]string {
	if len(fs) == 0 {
		return h
	}
	out := make(map[string]string, len(h)+len(fs))
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

// withMulti is withSingle for a multi-value header map.
func withMulti(h map[string][]string, fs []edgelimit.Field) map[string][]string {
	if len(fs) == 0 {
		return h
	}
	out := make(map[string][]string, len(h)+len(fs))
	for k, v := range h {
		if !replaced(fs, k) {
			out[k] = v
		}
	}
	vals := make([]string, len(fs))
	for i, f := range fs {
		vals[i] = f.Value
		out[f.Name] = vals[i : i+1 : i+1]
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

// multiOf renders the verdict's fields as a multi-value header map.
func multiOf(fs []edgelimit.Field) map[string][]string {
	h := make(map[string][]string, len(fs))
	vals := make([]string, len(fs))
	for i, f := range fs {
		vals[i] = f.Value
		h[f.Name] = vals[i : i+1 : i+1]
	}
	return h
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

// statusDescription is the ALB's status line text, like "429 Too Many Requests".
func statusDescription(code int) string {
	return strconv.Itoa(code) + " " + http.StatusText(code)
}

// rightmost returns the last entry of a comma-separated header list.
func rightmost(list string) string {
	if i := strings.LastIndexByte(list, ','); i >= 0 {
		list = list[i+1:]
	}
	return strings.TrimSpace(list)
}
