package handlers

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit/middleware"
)

// LoginRequest is the body of POST /login.
type LoginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// The one account POST /login knows. A DEMO credential, public on purpose:
// the example shows a rate limit that counts failed logins, not how to
// store passwords (use a real identity provider, or at least a slow
// password hash, in a real service).
const (
	DemoUsername = "demo"
	DemoPassword = "correct horse battery staple"
)

// LoginResponse is the body of a successful login.
type LoginResponse struct {
	Status   string `json:"status"`
	Username string `json:"username"`
}

// NewLogin returns the handler of POST /login {"username", "password"}: 200
// for the demo credential (DemoUsername, DemoPassword), 401 for any other
// (a problem body that does not say which part was wrong), 400 for a body
// that is not a login. Its policy (login-failures) charges only the 401s
// and 403s, after the response (charge_status), so an address is refused
// after 5 failed attempts in 15 minutes however many succeed, and a user
// who types the password right is never counted.
func NewLogin(d Deps) middleware.HTTPAPIHandler {
	log := d.logger()
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		b, ok := body(req)
		if !ok {
			return problem(413, "Content Too Large", "The body must be at most 64 KiB.")
		}
		if mt := mediaType(req); mt != "application/json" {
			return problem(415, "Unsupported Media Type", "Send application/json: {\"username\": \"...\", \"password\": \"...\"}.")
		}
		var in LoginRequest
		if err := json.Unmarshal(b, &in); err != nil || in.Username == "" || in.Password == "" {
			return badRequest("The body is not a JSON object with a username and a password.")
		}
		// Compare digests in constant time: neither the length nor a
		// prefix of the demo credential shows in the timing.
		u, p := sha256.Sum256([]byte(in.Username)), sha256.Sum256([]byte(in.Password))
		wu, wp := sha256.Sum256([]byte(DemoUsername)), sha256.Sum256([]byte(DemoPassword))
		if subtle.ConstantTimeCompare(u[:], wu[:])&subtle.ConstantTimeCompare(p[:], wp[:]) != 1 {
			log.InfoContext(ctx, "login: failed")
			resp, err := problem(401, "Unauthorized", "The username or password is wrong.")
			resp.Headers["WWW-Authenticate"] = `Bearer realm="edgelimit-demo"`
			return resp, err
		}
		log.InfoContext(ctx, "login: succeeded")
		return jsonResponse(200, LoginResponse{Status: "ok", Username: DemoUsername})
	}
}

// newContactFunction is the contact function's handler: POST /login to
// NewLogin, everything else to NewContact. It dispatches on the route API
// Gateway matched (the event's routeKey), which is also a route whose
// policies the engine applies to the request; an event without one (a
// test's, a Function URL's "$default") is matched by its path in the
// engine's canonical form, as RouteKey matches, which is what `edgelimit
// serve` puts in its events.
func newContactFunction(d Deps) middleware.HTTPAPIHandler {
	contact, login := NewContact(d), NewLogin(d)
	loginRoute := []string{"login"}
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		isLogin := req.RouteKey == "POST /login"
		if req.RouteKey == "" || req.RouteKey == "$default" {
			isLogin = req.RequestContext.HTTP.Method == "POST" && matchRoute(loginRoute, pathSegments(req))
		}
		if isLogin {
			return login(ctx, req)
		}
		return contact(ctx, req)
	}
}
