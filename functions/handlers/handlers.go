// Package handlers holds the logic of the example Lambda functions in
// functions/: each is an API Gateway HTTP API (payload 2.0) handler plus the
// policy file that guards it, embedded here. functions/<name>/main.go reads
// the environment (setup.FromEnv), wraps the handler with
// middleware.HTTPAPI and calls lambda.Start; `edgelimit serve` and the
// tests import the same handlers, so what runs locally is what is deployed.
//
//   - paid: GET /paid/{resource}, an API-key metered endpoint (durable,
//     exact, fail closed).
//   - contact: POST /contact, a contact form (kv, approximate, fail open),
//     and POST /login, a demo login whose policy counts only the failed
//     attempts (durable, charge_status: [401, 403]).
//   - search: GET /search?q=, a CPU-heavy unindexed scan (durable gcra per
//     address, the endpoint of the flood experiment).
//   - tts: POST /tts, an expensive downstream call stood in for by a small
//     speech synthesiser (signed window tokens and proof of work; seconds of
//     audio charged after the response, durable; at most 2 syntheses of a
//     client at once, inflight).
//
// The handlers never see a request the policies denied: the middleware
// answers those. They validate their own input and answer 400 with an
// application/problem+json body, like the middleware does; they never echo
// keys or secrets.
package handlers

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/internal/urlpath"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
)

//go:generate go run ./internal/gentrees

// The embedded policy files, one variable each, read only by
// Function.Policies (edgelimit serve, check and the tests): a function's
// bootstrap reads its compiled Tree and holds none of them.
var (
	//go:embed policies/paid.yaml
	paidPolicies []byte
	//go:embed policies/contact.yaml
	contactPolicies []byte
	//go:embed policies/search.yaml
	searchPolicies []byte
	//go:embed policies/tts.yaml
	ttsPolicies []byte
)

// Deps are what every handler is built with.
type Deps struct {
	// Logger receives the handler's own logs; default slog.Default().
	Logger *slog.Logger
}

func (d Deps) logger() *slog.Logger {
	if d.Logger != nil {
		return d.Logger
	}
	return slog.Default()
}

// Function is one example Lambda function.
type Function struct {
	// Name is the function's directory under functions/ and its name in
	// logs ("paid").
	Name string
	// LogicalID is the function's resource in template.yaml ("PaidFunction").
	LogicalID string
	// PolicyFile names the embedded policy file in messages
	// ("functions/handlers/policies/paid.yaml").
	PolicyFile string
	// tree is the policy file's tree, compiled at build time
	// (trees_gen.go).
	tree *policy.Node
	// Routes are the HTTP API routes (template.yaml's HttpApi events) that
	// invoke the function, in API Gateway's "METHOD /path" syntax.
	Routes []string
	// New builds the handler, once per instance.
	New func(Deps) middleware.HTTPAPIHandler
}

// The example functions. Each is initialised statically (no init code
// refers to it), so the linker keeps only the one a function's main
// uses: paid's bootstrap holds neither contact's mail parser nor tts's
// synthesiser.
var (
	Paid = Function{Name: "paid", LogicalID: "PaidFunction", PolicyFile: "functions/handlers/policies/paid.yaml",
		Routes: []string{"GET /paid/{resource}"}, New: NewPaid, tree: paidTree}
	Contact = Function{Name: "contact", LogicalID: "ContactFunction", PolicyFile: "functions/handlers/policies/contact.yaml",
		Routes: []string{"POST /contact", "POST /login"}, New: newContactFunction, tree: contactTree}
	Search = Function{Name: "search", LogicalID: "SearchFunction", PolicyFile: "functions/handlers/policies/search.yaml",
		Routes: []string{"GET /search"}, New: newSearchFunction, tree: searchTree}
	TTS = Function{Name: "tts", LogicalID: "TTSFunction", PolicyFile: "functions/handlers/policies/tts.yaml",
		Routes: []string{"POST /tts"}, New: NewTTS, tree: ttsTree}
)

func newSearchFunction(d Deps) middleware.HTTPAPIHandler { return NewSearch(d, SearchConfig{}) }

// Policies returns the function's embedded policy file. It looks the file
// up by name rather than through a field of Function, so that a bootstrap,
// which reads the compiled Tree and never calls Policies, links none of the
// YAML text (the Function values stay statically initialised).
func (f Function) Policies() []byte {
	switch f.Name {
	case Paid.Name:
		return paidPolicies
	case Contact.Name:
		return contactPolicies
	case Search.Name:
		return searchPolicies
	case TTS.Name:
		return ttsPolicies
	}
	return nil
}

// Tree returns the embedded policy file's tree (policy.Decode's), compiled
// at build time into trees_gen.go: a function hands it to setup instead of
// the YAML, so that its bootstrap links no YAML parser. Change a policy
// file, then run `make generate`; TestTreesAreGenerated fails until then.
func (f Function) Tree() *policy.Node { return f.tree }

// All returns every example function, in a stable order.
func All() []Function { return []Function{Paid, Contact, Search, TTS} }

// Lookup returns the function named name.
func Lookup(name string) (Function, bool) {
	for _, f := range All() {
		if f.Name == name {
			return f, true
		}
	}
	return Function{}, false
}

// MaxBody bounds the request bodies the handlers read (after base64
// decoding); larger bodies are a 413.
const MaxBody = 64 << 10

func jsonResponse(status int, v any) (events.APIGatewayV2HTTPResponse, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return events.APIGatewayV2HTTPResponse{
		StatusCode: status,
		Headers:    map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store"},
		Body:       string(b),
	}, nil
}

// problem answers status with an RFC 9457 body. detail is written for the
// client and must not contain client input.
func problem(status int, title, detail string) (events.APIGatewayV2HTTPResponse, error) {
	b, _ := json.Marshal(map[string]any{"type": "about:blank", "status": status, "title": title, "detail": detail})
	return events.APIGatewayV2HTTPResponse{
		StatusCode: status,
		Headers:    map[string]string{"Content-Type": "application/problem+json", "Cache-Control": "no-store"},
		Body:       string(b),
	}, nil
}

func badRequest(detail string) (events.APIGatewayV2HTTPResponse, error) {
	return problem(400, "Bad Request", detail)
}

// body returns the request body, base64-decoded when API Gateway encoded it,
// and false when it is larger than MaxBody or not valid base64.
func body(req events.APIGatewayV2HTTPRequest) ([]byte, bool) {
	if !req.IsBase64Encoded {
		if len(req.Body) > MaxBody {
			return nil, false
		}
		return []byte(req.Body), true
	}
	if base64.StdEncoding.DecodedLen(len(req.Body)) > MaxBody+3 {
		return nil, false
	}
	b, err := base64.StdEncoding.DecodeString(req.Body)
	if err != nil || len(b) > MaxBody {
		return nil, false
	}
	return b, true
}

// header returns a request header; API Gateway v2 lower-cases names, a
// test event may not.
func header(req events.APIGatewayV2HTTPRequest, name string) string {
	if v, ok := req.Headers[strings.ToLower(name)]; ok {
		return v
	}
	for k, v := range req.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// mediaType returns the Content-Type's media type, lower case.
func mediaType(req events.APIGatewayV2HTTPRequest) string {
	ct, _, _ := strings.Cut(header(req, "Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(ct))
}

// Quota is one policy's state after an allowed request, as the handlers
// report it in their bodies.
type Quota struct {
	Policy    string `json:"policy"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	// ResetSeconds is the time until the quota is whole again.
	ResetSeconds int64 `json:"reset_seconds"`
}

// ceilSeconds rounds d up to whole seconds, as the RateLimit fields do.
func ceilSeconds(d time.Duration) int64 { return int64((max(d, 0) + time.Second - 1) / time.Second) }

// quotas returns the decisions the middleware stored in ctx, if it did.
func quotas(ctx context.Context) []Quota {
	v, ok := edgelimit.FromContext(ctx)
	if !ok {
		return nil
	}
	var out []Quota
	for _, d := range v.Decisions {
		if d.Policy == "" || d.Degraded {
			continue
		}
		out = append(out, Quota{Policy: d.Policy, Limit: d.Limit, Remaining: d.Remaining, ResetSeconds: ceilSeconds(d.Reset)})
	}
	return out
}

// Mux returns one handler that serves every example function's routes
// (Function.Routes, API Gateway's route syntax: {name} matches one path
// segment, {name+} the rest of the path) and passes any other request to
// fallback. `edgelimit serve` puts it behind one engine to run all the
// examples locally; each handler is built once, here.
func Mux(d Deps, fallback middleware.HTTPAPIHandler) middleware.HTTPAPIHandler {
	if fallback == nil {
		panic("handlers: Mux: nil fallback")
	}
	type route struct {
		method string
		parts  []string
		h      middleware.HTTPAPIHandler
	}
	var routes []route
	for _, f := range All() {
		h := f.New(d)
		for _, r := range f.Routes {
			method, path, _ := strings.Cut(r, " ")
			routes = append(routes, route{method, strings.Split(strings.Trim(path, "/"), "/"), h})
		}
	}
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		segs := pathSegments(req)
		method := req.RequestContext.HTTP.Method
		for _, r := range routes {
			if r.method == method && matchRoute(r.parts, segs) {
				return r.h(ctx, req)
			}
		}
		return fallback(ctx, req)
	}
}

// RouteKey returns the route API Gateway would match for a request to the
// example functions ("POST /contact", "GET /paid/{resource}"), with the
// same matching as Mux, or "$default" when none does. `edgelimit serve`
// puts it in the events it builds, as the gateway does.
func RouteKey(method, path string) string {
	segs := canonicalSegments(path)
	for _, f := range All() {
		for _, r := range f.Routes {
			m, p, _ := strings.Cut(r, " ")
			if m == method && matchRoute(strings.Split(strings.Trim(p, "/"), "/"), segs) {
				return r
			}
		}
	}
	return "$default"
}

// pathSegments are the segments of req's path in the canonical form the
// engine matches policies against (internal/urlpath), so that a handler
// chosen by path is always the one whose route's policies were applied:
// "/contact/../login" is /login to both.
func pathSegments(req events.APIGatewayV2HTTPRequest) []string {
	path := req.RawPath
	if path == "" {
		path = req.RequestContext.HTTP.Path
	}
	return canonicalSegments(path)
}

// canonicalSegments splits path's canonical form; a path that has none
// (not absolute, a bad escape) has no segments and matches no route.
func canonicalSegments(path string) []string {
	c := urlpath.Canonical(path)
	if c == "" {
		return nil
	}
	return strings.Split(strings.Trim(c, "/"), "/")
}

// matchRoute matches path segments against an API Gateway route's.
func matchRoute(route, path []string) bool {
	for i, p := range route {
		greedy := strings.HasPrefix(p, "{") && strings.HasSuffix(p, "+}")
		switch {
		case greedy:
			return i < len(path) && path[i] != ""
		case i >= len(path):
			return false
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}"):
			if path[i] == "" {
				return false
			}
		case p != path[i]:
			return false
		}
	}
	return len(route) == len(path)
}
