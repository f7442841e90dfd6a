package middleware

import (
	"context"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
)

// HTTPAPIHandler handles API Gateway HTTP API events (payload format 2.0).
type HTTPAPIHandler func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// FunctionURLHandler handles Lambda Function URL events.
type FunctionURLHandler func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error)

// RESTAPIHandler handles API Gateway REST API proxy events (payload format 1.0).
type RESTAPIHandler func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error)

// ALBHandler handles Application Load Balancer target group events.
type ALBHandler func(context.Context, events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error)

// headersOf reads the multi-value headers when the event has any (they
// hold every value of a repeated header), else the single-value ones.
func headersOf(single map[string]string, multi map[string][]string) edgelimit.Getter {
	if len(multi) > 0 {
		return multiMapHeaders(multi)
	}
	return mapHeaders(single)
}

func mustWrap(name string, e *edgelimit.Engine, isNil bool) {
	if e == nil {
		panic("middleware: " + name + ": nil *edgelimit.Engine")
	}
	if isNil {
		panic("middleware: " + name + ": nil handler")
	}
}

// guard is the one flow every Lambda adapter shares; the adapters only
// translate. It decides the request e.Decide sees in input(req); a refusal
// is answered by refuse without calling h; otherwise h runs with the
// Verdict in its context (edgelimit.FromContext) and merge adds the
// verdict's headers to its response. h's error is returned unchanged.
func guard[Req, Resp any](name string, e *edgelimit.Engine, h func(context.Context, Req) (Resp, error),
	input func(*Req) edgelimit.Input,
	refuse func(*Req, *edgelimit.Verdict) Resp,
	merge func(*Req, *Resp, *edgelimit.Verdict),
	status func(*Resp) int,
) func(context.Context, Req) (Resp, error) {
	mustWrap(name, e, h == nil)
	return func(ctx context.Context, req Req) (resp Resp, err error) {
		in := input(&req)
		v := e.Decide(ctx, &in)
		if !v.Allowed {
			resp = refuse(&req, v)
			v.Release()
			return resp, nil
		}
		hctx := v.Context(ctx)
		finished := false
		defer func() {
			if !finished { // the handler panicked: the request failed
				v.Finish(ctx, 500)
			}
		}()
		resp, err = h(hctx, req)
		finished = true
		if err != nil {
			v.Finish(ctx, 500)
			v.Release()
			return resp, err
		}
		v.Finish(ctx, status(&resp))
		// The header values are the request's own memory: the response
		// keeps them after the Verdict goes back.
		merge(&req, &resp, v)
		v.Release()
		return resp, nil
	}
}

// HTTPAPI wraps an API Gateway HTTP API (payload 2.0) handler so that e
// decides every request before h runs. The client address is
// requestContext.http.sourceIp; claims come from a JWT or Lambda authorizer.
// The result goes straight into lambda.Start.
func HTTPAPI(e *edgelimit.Engine, h HTTPAPIHandler) HTTPAPIHandler {
	return guard("HTTPAPI", e, h,
		func(req *events.APIGatewayV2HTTPRequest) edgelimit.Input {
			in := v2Input(req.RequestContext.HTTP, req.RawPath, req.Headers, httpAPIClaims(req.RequestContext.Authorizer))
			in.Route = req.RouteKey
			if in.Route == "" {
				in.Route = req.RequestContext.RouteKey
			}
			return in
		},
		func(_ *events.APIGatewayV2HTTPRequest, v *edgelimit.Verdict) events.APIGatewayV2HTTPResponse {
			return events.APIGatewayV2HTTPResponse{StatusCode: status(v), Headers: singleOf(v.Header()), Body: lambdaBody(v)}
		},
		func(_ *events.APIGatewayV2HTTPRequest, resp *events.APIGatewayV2HTTPResponse, v *edgelimit.Verdict) {
			resp.Headers = withSingle(resp.Headers, v.Header())
		},
		func(resp *events.APIGatewayV2HTTPResponse) int { return statusOr200(resp.StatusCode) })
}

// FunctionURL wraps a Lambda Function URL handler so that e decides every
// request before h runs. The client address is
// requestContext.http.sourceIp; Function URLs carry no claims. The result
// goes straight into lambda.Start.
func FunctionURL(e *edgelimit.Engine, h FunctionURLHandler) FunctionURLHandler {
	return guard("FunctionURL", e, h,
		func(req *events.LambdaFunctionURLRequest) edgelimit.Input {
			http := events.APIGatewayV2HTTPRequestContextHTTPDescription(req.RequestContext.HTTP)
			return v2Input(http, req.RawPath, req.Headers, nil)
		},
		func(_ *events.LambdaFunctionURLRequest, v *edgelimit.Verdict) events.LambdaFunctionURLResponse {
			return events.LambdaFunctionURLResponse{StatusCode: status(v), Headers: singleOf(v.Header()), Body: lambdaBody(v)}
		},
		func(_ *events.LambdaFunctionURLRequest, resp *events.LambdaFunctionURLResponse, v *edgelimit.Verdict) {
			resp.Headers = withSingle(resp.Headers, v.Header())
		},
		func(resp *events.LambdaFunctionURLResponse) int { return statusOr200(resp.StatusCode) })
}

// v2Input is the Input of a payload-2.0 event (HTTP API and Function URL).
func v2Input(http events.APIGatewayV2HTTPRequestContextHTTPDescription, rawPath string, headers map[string]string, claims edgelimit.Getter) edgelimit.Input {
	if rawPath == "" {
		rawPath = http.Path
	}
	return edgelimit.Input{
		Method:   http.Method,
		Path:     rawPath,
		SourceIP: http.SourceIP,
		Header:   mapHeaders(headers),
		Claims:   claims,
	}
}

// RESTAPI wraps an API Gateway REST API proxy (payload 1.0) handler so that e
// decides every request before h runs. The client address is
// requestContext.identity.sourceIp; claims come from a Cognito user pool
// authorizer's claims or a Lambda authorizer's context. The verdict's headers
// are added to the response's MultiValueHeaders. The result goes straight
// into lambda.Start.
func RESTAPI(e *edgelimit.Engine, h RESTAPIHandler) RESTAPIHandler {
	return guard("RESTAPI", e, h,
		func(req *events.APIGatewayProxyRequest) edgelimit.Input {
			return edgelimit.Input{
				Method:   req.HTTPMethod,
				Path:     req.Path,
				Route:    req.Resource,
				SourceIP: req.RequestContext.Identity.SourceIP,
				Header:   headersOf(req.Headers, req.MultiValueHeaders),
				Claims:   restAPIClaims(req.RequestContext.Authorizer),
			}
		},
		func(_ *events.APIGatewayProxyRequest, v *edgelimit.Verdict) events.APIGatewayProxyResponse {
			return events.APIGatewayProxyResponse{StatusCode: status(v), MultiValueHeaders: multiOf(v.Header(), v.Values), Body: lambdaBody(v)}
		},
		func(_ *events.APIGatewayProxyRequest, resp *events.APIGatewayProxyResponse, v *edgelimit.Verdict) {
			resp.MultiValueHeaders = withMulti(resp.MultiValueHeaders, v.Header(), v.Values)
			resp.Headers = withoutOurs(resp.Headers, v.Header())
		},
		func(resp *events.APIGatewayProxyResponse) int { return statusOr200(resp.StatusCode) })
}

// ALB wraps an Application Load Balancer target group handler so that e
// decides every request before h runs.
//
// The ALB event has no source address field: the client address is the
// right-most entry of X-Forwarded-For, the one the load balancer itself
// appended for the peer it accepted the connection from. Entries to the left
// of it come from the client and are ignored (a policy's trusted_proxies
// reads further left, hop by hop). ALB events carry no claims.
//
// A target group with multi-value headers enabled sends multiValueHeaders and
// must be answered with multiValueHeaders; the response uses the form the
// request used. The result goes straight into lambda.Start.
func ALB(e *edgelimit.Engine, h ALBHandler) ALBHandler {
	return guard("ALB", e, h,
		func(req *events.ALBTargetGroupRequest) edgelimit.Input {
			in := edgelimit.Input{Method: req.HTTPMethod, Path: req.Path, Header: headersOf(req.Headers, req.MultiValueHeaders)}
			in.SourceIP = rightmost(in.Header.Get("X-Forwarded-For"))
			return in
		},
		func(req *events.ALBTargetGroupRequest, v *edgelimit.Verdict) events.ALBTargetGroupResponse {
			code := status(v)
			resp := events.ALBTargetGroupResponse{StatusCode: code, StatusDescription: statusDescription(code), Body: lambdaBody(v)}
			if albMulti(req) {
				resp.MultiValueHeaders = multiOf(v.Header(), v.Values)
			} else {
				resp.Headers = singleOf(v.Header())
			}
			return resp
		},
		func(req *events.ALBTargetGroupRequest, resp *events.ALBTargetGroupResponse, v *edgelimit.Verdict) {
			if albMulti(req) {
				resp.MultiValueHeaders = withMulti(resp.MultiValueHeaders, v.Header(), v.Values)
				resp.Headers = withoutOurs(resp.Headers, v.Header())
			} else {
				resp.Headers = withSingle(resp.Headers, v.Header())
			}
		},
		func(resp *events.ALBTargetGroupResponse) int { return statusOr200(resp.StatusCode) })
}

// statusOr200 is a Lambda response's status: API Gateway answers 200 for a
// response that sets none.
func statusOr200(code int) int {
	if code == 0 {
		return 200
	}
	return code
}

// albMulti reports a target group with multi-value headers enabled, which
// must be answered in that form.
func albMulti(req *events.ALBTargetGroupRequest) bool {
	return req.MultiValueHeaders != nil || req.Headers == nil && req.MultiValueQueryStringParameters != nil
}
