// Package middleware puts an [edgelimit.Engine] in front of AWS Lambda
// handlers and net/http handlers.
//
// Each adapter has the shape of aws-lambda-go's cfn.LambdaWrap: it takes a
// typed handler and returns a handler of the same type, which goes straight
// into lambda.Start, with no reflection and every type checked at compile
// time:
//
//	lambda.Start(middleware.HTTPAPI(engine, handler))
//
// There is one wrapper per event type:
//
//   - [HTTPAPI]: API Gateway HTTP API, payload 2.0
//     (events.APIGatewayV2HTTPRequest and Response).
//   - [FunctionURL]: Lambda Function URL (events.LambdaFunctionURLRequest and
//     Response).
//   - [RESTAPI]: API Gateway REST API, payload 1.0
//     (events.APIGatewayProxyRequest and Response).
//   - [ALB]: Application Load Balancer target group
//     (events.ALBTargetGroupRequest and Response), with or without
//     multi-value headers.
//   - [Handler]: net/http.
//
// # One core, thin adapters
//
// An adapter only translates. It reads the method, the raw path, the client
// address, the headers (case-insensitively) and the authorizer's claims into
// an [edgelimit.Input], asks [edgelimit.Engine.Decide], and renders the
// [edgelimit.Verdict]:
//
//   - Allowed: the wrapped handler runs and the verdict's headers
//     (RateLimit-Policy, RateLimit, X-RateLimit-*, Edgelimit-Token) are added
//     to its response. These replace a header of the same name the handler
//     may have set, in any case; every other header of the handler is kept
//     as it is. The Lambda adapters never write to the handler's header
//     maps (a handler may return a shared one): the response carries a
//     copy. On REST API, and on ALB with multi-value headers, they go in
//     MultiValueHeaders, as one-element slices that may be shared with
//     other responses (as [Handler]'s are): code between the adapter and
//     the runtime may replace them but must not write into them. The net/http adapter sets them just before the
//     handler's response header is written. An error from the handler is
//     returned unchanged. The handler's context
//     carries the verdict: [edgelimit.FromContext] returns it, with the
//     route and each policy's decision ([Handler] leaves it out, and the
//     request copy it needs, with [WithoutVerdictContext]).
//   - Not allowed: the handler does not run. The adapter answers the
//     verdict's status (400, 403, 429 or 503) with its headers and its
//     application/problem+json body, as plain text (IsBase64Encoded false).
//     The adapters keep up to 256 recent bodies (the text they sent), so
//     that a flood's identical 429s share one string.
//
// Because the engine decides and renders everything, the same request gets
// the same status, headers and body through every adapter. The tests run one
// table of scenarios through all of them, built from real event samples.
// Malformed input (an empty or lower-case method, a path without a leading
// slash or with invalid UTF-8, an oversized key header) is a 400 problem,
// never a panic or a 5xx; percent-encoded dot segments are resolved before
// routes are matched, so /public/%2e%2e/paid/x is limited as /paid/x.
//
// # Where the client address comes from
//
// The source address is what the ip key uses, and is always taken from the
// part of the event the client cannot write:
//
//   - HTTPAPI and FunctionURL: requestContext.http.sourceIp.
//   - RESTAPI: requestContext.identity.sourceIp.
//   - ALB: the event has no source address field. The load balancer appends
//     the address of the peer it accepted the connection from to
//     X-Forwarded-For, so the right-most entry of that header is the client
//     (or the nearest proxy in front of the load balancer); everything left
//     of it was sent by the client and is not trusted.
//   - Handler: the host part of http.Request.RemoteAddr. Put a proxy-aware
//     middleware in front only if you know what it trusts.
//
// X-Forwarded-For is otherwise never read by the adapters. The engine reads
// it only for a policy that sets trusted_proxies, counting hops from the
// right.
//
// # Claims
//
// A claim: key reads the authorizer's output: the JWT authorizer's claims
// (HTTP API), the Lambda authorizer's context (HTTP API and REST API), and
// the Cognito user pool authorizer's claims (REST API, the "claims" map,
// looked up before the rest of the context). Numbers and booleans are used as
// their JSON text; nested objects and lists are ignored. Function URLs (IAM
// only) and ALB carry no claims. A net/http service that authenticates its
// own requests says where their claims are with [WithClaims] (and [Claims]
// for a decoded JWT claim map).
package middleware
