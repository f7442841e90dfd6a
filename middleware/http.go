package middleware

import (
	"bufio"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/edgelimit/edgelimit"
)

// An Option configures Handler.
type Option interface{ apply(*options) }

type options struct {
	claims    func(*http.Request) edgelimit.Getter
	noContext bool
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithClaims tells Handler where a request's claims are, for policies
// keyed by claim:NAME: claims(r) returns them, typically from what an
// authentication middleware in front of Handler stored in r's context (see
// Claims for a claim map), or nil when the request has none. Without it,
// net/http requests carry no claims, and a claim-keyed policy answers them
// as its on_missing_key says.
func WithClaims(claims func(r *http.Request) edgelimit.Getter) Option {
	return optionFunc(func(o *options) { o.claims = claims })
}

// WithoutVerdictContext tells Handler that next does not look its verdict
// up: the request goes to next as it came, and edgelimit.FromContext finds
// nothing in its context. Putting the verdict in the context costs a copy
// of the http.Request (r.WithContext, about 320 bytes per request, the
// larger part of what Handler allocates); without it an allowed request
// allocates only its response headers' memory. A request with work after
// the response (Verdict.Finishes: a policy with charge: response, reserve,
// charge_status or refund_status, an in-flight limit) still carries its
// verdict, so that next can report its cost with ReportCost; the verdict's
// headers are set on the response either way.
func WithoutVerdictContext() Option {
	return optionFunc(func(o *options) { o.noContext = true })
}

// Claims adapts a decoded JWT claim set (golang-jwt's jwt.MapClaims, or any
// map[string]any from JSON) for WithClaims: strings as they are, numbers and
// booleans as their JSON text; objects, lists and null are absent, as in the
// Lambda adapters.
func Claims(m map[string]any) edgelimit.Getter {
	if m == nil {
		return nil
	}
	return contextClaims(m)
}

// Handler wraps next so that e decides every request before next runs.
//
// The client address is the host part of r.RemoteAddr, the TCP peer. The
// path is the request's escaped path, as sent. Claims come from
// WithClaims, if given. The request next gets carries its verdict in its
// context (edgelimit.FromContext), unless WithoutVerdictContext is given. On an allowed request the verdict's headers are set
// on the response when next first writes (or when it returns without
// writing), replacing any of the same name next set; otherwise the verdict's
// status, headers and problem body are written and next does not run.
func Handler(e *edgelimit.Engine, next http.Handler, opts ...Option) http.Handler {
	mustWrap("Handler", e, next == nil)
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := edgelimit.Input{
			Method:   r.Method,
			SourceIP: remoteHost(r.RemoteAddr),
			Header:   httpHeaders(r.Header),
		}
		if o.claims != nil {
			in.Claims = o.claims(r)
		}
		if r.URL != nil {
			in.Path = r.URL.EscapedPath()
		}
		v := e.Decide(r.Context(), &in)
		fs := v.Header()
		if !v.Allowed {
			setHeaders(w.Header(), fs, v.Values)
			w.WriteHeader(status(v))
			if len(v.Body) > 0 {
				_, _ = w.Write(v.Body) // copied by the writer, before Release
			} else {
				_, _ = w.Write([]byte(body(v)))
			}
			v.Release()
			return
		}
		ctx := r.Context()
		if !o.noContext || v.Finishes() {
			r = r.WithContext(v.Context(ctx))
		}
		if len(fs) == 0 && !v.Finishes() {
			next.ServeHTTP(w, r)
			v.Release()
			return
		}
		lw := writers.Get().(*limitedWriter)
		lw.ResponseWriter, lw.v = w, v
		finished := false
		defer func() {
			if !finished { // the handler panicked: the request failed
				v.Finish(ctx, 500)
			}
		}()
		next.ServeHTTP(lw, r)
		finished = true
		lw.apply()
		v.Finish(ctx, lw.status())
		// A handler may not use its ResponseWriter once it has returned
		// (net/http's rule), so the writer serves the next request. The
		// header values the response holds are the request's own memory,
		// not the Verdict's, so the Verdict can go back before net/http
		// writes them.
		*lw = limitedWriter{}
		writers.Put(lw)
		v.Release()
	})
}

// writers recycles the wrapping writers of allowed requests.
var writers = sync.Pool{New: func() any { return new(limitedWriter) }}

// remoteHost returns the host of a "host:port" or "[v6]:port" address, or
// addr itself: what net.SplitHostPort would, without its error value.
func remoteHost(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return addr
	}
	if addr[0] == '[' {
		if j := strings.IndexByte(addr, ']'); j == i-1 {
			return addr[1:j]
		}
		return addr
	}
	if strings.IndexByte(addr[:i], ':') >= 0 {
		return addr // a bare IPv6 address, no port
	}
	return addr[:i]
}

// canonical returns the net/http form of a verdict field's name: the
// engine's own names are spelled out ("RateLimit" is "Ratelimit" to
// net/http), so that the common fields cost a comparison, not
// http.CanonicalHeaderKey's scan (TestCanonicalNames checks them against it).
func canonical(name string) string {
	switch name {
	case "RateLimit":
		return "Ratelimit"
	case "RateLimit-Policy":
		return "Ratelimit-Policy"
	case "X-RateLimit-Limit":
		return "X-Ratelimit-Limit"
	case "X-RateLimit-Remaining":
		return "X-Ratelimit-Remaining"
	case "X-RateLimit-Reset":
		return "X-Ratelimit-Reset"
	case "Retry-After", "Content-Type":
		return name
	}
	return http.CanonicalHeaderKey(name)
}

// setHeaders applies the verdict's fields to a net/http header map with the
// same rule as the Lambda adapters: each replaces the handler's header of
// that name. values(i) is fs[i]'s value as a one-element slice: the
// verdict's own (Verdict.Values), so setting costs no allocation.
func setHeaders(h http.Header, fs []edgelimit.Field, values func(i int) []string) {
	var buf [8]string
	names := buf[:0]
	if len(fs) > len(buf) {
		names = make([]string, 0, len(fs))
	}
	for _, f := range fs {
		names = append(names, canonical(f.Name))
	}
	// One pass over the handler's header map drops the keys it set
	// directly in a non-canonical spelling of a verdict field's name,
	// unless every key it holds is one named here.
	if len(h) > 0 && !onlyNamed(h, names) {
		for k := range h {
			for i, f := range fs {
				if len(k) == len(f.Name) && k != names[i] && equalFold(k, f.Name) {
					delete(h, k)
					break
				}
			}
		}
	}
	for i, n := range names {
		h[n] = values(i)
	}
}

// onlyNamed reports whether every key of h is Content-Type or one of
// names (canonical), found by lookups, which on the small map a handler
// sets before its first write cost less than a pass over it. Most
// handlers set nothing else.
func onlyNamed(h http.Header, names []string) bool {
	n := 0
	if _, ok := h["Content-Type"]; ok {
		n++
	}
	for i, name := range names {
		if n == len(h) {
			break
		}
		if _, ok := h[name]; ok && name != "Content-Type" && !slices.Contains(names[:i], name) {
			n++ // each key counted once
		}
	}
	return n == len(h)
}

// limitedWriter sets the verdict's headers just before the wrapped handler's
// response header is written, so they win over the handler's own.
type limitedWriter struct {
	http.ResponseWriter
	v       *edgelimit.Verdict
	applied bool
	code    int // the status written, 0 until then
}

// status is the response's status: 200 once the body is written (or
// nothing at all), as net/http sends.
func (w *limitedWriter) status() int {
	if w.code == 0 {
		return 200
	}
	return w.code
}

func (w *limitedWriter) apply() {
	if w.applied {
		return
	}
	w.applied = true
	setHeaders(w.ResponseWriter.Header(), w.v.Header(), w.v.Values)
}

// WriteHeader sets the verdict's headers and writes the status.
func (w *limitedWriter) WriteHeader(code int) {
	w.apply()
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write sets the verdict's headers if the status is not written yet, then
// writes b.
func (w *limitedWriter) Write(b []byte) (int, error) {
	w.apply()
	if w.code == 0 {
		w.code = 200
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *limitedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush sets the verdict's headers and flushes, if the underlying writer can.
func (w *limitedWriter) Flush() {
	w.apply()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands over the connection, if the underlying writer can.
func (w *limitedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

var _ interface {
	http.Flusher
	http.Hijacker
} = (*limitedWriter)(nil)
