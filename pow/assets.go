package pow

import (
	_ "embed"
	"html"
	"net/http"
	"strings"
)

// ScriptJS is pow.js, the dependency-free browser solver: it defines
// EdgelimitPow.solve(challenge, {onProgress, signal, workers}), which
// resolves to the Edgelimit-Proof value, hashing in Web Workers started from
// the script's own URL. Serve it as text/javascript (ScriptHandler does).
//
//go:embed pow.js
var ScriptJS string

// DemoHTML is the demo page: it calls a signed route (POST /tts unless its
// data attributes or query string say otherwise), solves the challenge with
// a progress bar, and shows the allowed responses and the remaining quota
// read from the RateLimit header. It loads "pow.js" relative to its own URL,
// so serve it at "/" next to ScriptJS at "/pow.js". See DemoPage to set the
// route.
//
//go:embed demo.html
var DemoHTML string

// DemoPage returns DemoHTML set to call method and path (empty keeps the
// defaults, POST /tts). The query string (?method=&path=&body=&auto=N) still
// overrides them in the browser.
func DemoPage(method, path string) string {
	page := DemoHTML
	if method != "" {
		page = strings.Replace(page, `data-method="POST"`, `data-method="`+html.EscapeString(strings.ToUpper(method))+`"`, 1)
	}
	if path != "" {
		page = strings.Replace(page, `data-path="/tts"`, `data-path="`+html.EscapeString(path)+`"`, 1)
	}
	return page
}

// ScriptHandler serves ScriptJS.
func ScriptHandler() http.Handler {
	return staticHandler("text/javascript; charset=utf-8", ScriptJS)
}

// DemoHandler serves DemoPage(method, path).
func DemoHandler(method, path string) http.Handler {
	return staticHandler("text/html; charset=utf-8", DemoPage(method, path))
}

func staticHandler(contentType, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write([]byte(body))
	})
}
