package edgelimit

// Input is the adapter-neutral view of an incoming request: what every
// adapter (API Gateway v1/v2, Function URL, ALB, net/http) extracts from its
// event before the engine decides.
type Input struct {
	Method string
	// Path is the request path as received (its canonical form is matched,
	// see policy.Route).
	Path string
	// Route, when the event says which route an API gateway matched, is that
	// route: an HTTP API routeKey ("GET /paid/{resource}") or a REST API
	// resource ("/paid/{resource}"). The policies of the routes that match it
	// guard the request too, so the limiter and the gateway never disagree in
	// the client's favour. Empty ("$default" included) when unknown.
	Route string
	// SourceIP is the client address from the event's request context (the
	// TCP peer for net/http), never from a header.
	SourceIP string
	// Header are the request's headers, looked up case-insensitively
	// (repeated values joined with ", "); nil for none. An http.Header
	// will do for a request without repeated headers.
	Header Getter
	// Claims are the authorizer's JWT claims, if any, by exact name.
	Claims Getter
}

// Getter looks a request's values up by name: its headers, or the claims
// of its authorizer's JWT. It returns "" for a name it does not have.
type Getter interface {
	Get(name string) string
}
