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
func headersOf(single map[string]string, multi map[string][]string) edgelimit.HeaderGetter {
	if len(multi) > 0 {
		return edgelimit.MultiMapHeaders(multi)
	}
	return edgelimit.MapHeaders(single)
}

func mustWrap(name string, e *edgelimit.Engine, isNil bool) {
	if e == nil {
		panic("middleware: " + name + ": nil *edgelimit.Engine")
	}
	if isNil {
		panic("middleware: " + name + ": nil handler")
	}
}

// HTTPAPI wraps an API Gateway HTTP API (payload 2.0) handler so that e
// decides every request before h runs. The client address is
// requestContext.http.sourceIp; claims come from a JWT or Lambda authorizer.
// The result goes straight into lambda.Start.
func HTTPAPI(e *edgelimit.Engine, h HTTPAPIHandler) HTTPAPIHandler {
	mustWrap("HTTPAPI", e, h == nil)
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		in := edgelimit.Input{
			Method:   req.RequestContext.HTTP.Method,
			Path:     req.RawPath,
			SourceIP: req.RequestContext.HTTP.SourceIP,
			Header:   edgelimit.MapHeaders(req.Headers),
			Claims:   httpAPIClaims(req.RequestContext.Authorizer),
		}
		if in.Path == "" {
			in.Path = req.RequestContext.HTTP.Path
		}
		v := e.Decide(ctx, &in)
		if !v.Allowed {
			return events.APIGatewayV2HTTPResponse{
				StatusCode: status(v),
				Headers:    singleOf(v.Header()),
				Body:       body(v),
			}, nil
		}
		resp, err := h(edgelimit.NewContext(ctx, v), req)
		if err != nil {
			return resp, err
		}
		resp.Headers = withSingle(resp.Headers, resp.MultiValueHeaders, v.Header())
		return resp, nil
	}
}

// FunctionURL wraps a Lambda Function URL handler so that e decides every
// request before h runs. The client address is
// requestContext.http.sourceIp; Function URLs carry no claims. The result
// goes straight into lambda.Start.
func FunctionURL(e *edgelimit.Engine, h FunctionURLHandler) FunctionURLHandler {
	mustWrap("FunctionURL", e, h == nil)
	return func(ctx context.Context, req events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		in := edgelimit.Input{
			Method:   req.RequestContext.HTTP.Method,
			Path:     req.RawPath,
			SourceIP: req.RequestContext.HTTP.SourceIP,
			Header:   edgelimit.MapHeaders(req.Headers),
		}
		if in.Path == "" {
			in.Path = req.RequestContext.HTTP.Path
		}
		v := e.Decide(ctx, &in)
		if !v.Allowed {
			return events.LambdaFunctionURLResponse{
				StatusCode: status(v),
				Headers:    singleOf(v.Header()),
				Body:       body(v),
			}, nil
		}
		resp, err := h(edgelimit.NewContext(ctx, v), req)
		if err != nil {
			return resp, err
		}
		resp.Headers = withSingle(resp.Headers, nil, v.Header())
		return resp, nil
	}
}

// RESTAPI wraps an API Gateway REST API proxy (payload 1.0) handler so that e
// decides every request before h runs. The client address is
// requestContext.identity.sourceIp; claims come from a Cognito user pool
// authorizer's claims or a Lambda authorizer's context. The verdict's headers
// are added to the response's MultiValueHeaders. The result goes straight
// into lambda.Start.
func RESTAPI(e *edgelimit.Engine, h RESTAPIHandler) RESTAPIHandler {
	mustWrap("RESTAPI", e, h == nil)
	return func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		in := edgelimit.Input{
			Method:   req.HTTPMethod,
			Path:     req.Path,
			SourceIP: req.RequestContext.Identity.SourceIP,
			Claims:   restAPIClaims(req.RequestContext.Authorizer),
		}
		in.Header = headersOf(req.Headers, req.MultiValueHeaders)
		v := e.Decide(ctx, &in)
		if !v.Allowed {
			return events.APIGatewayProxyResponse{
				StatusCode:        status(v),
				MultiValueHeaders: multiOf(v.Header()),
				Body:              body(v),
			}, nil
		}
		resp, err := h(edgelimit.NewContext(ctx, v), req)
		if err != nil {
			return resp, err
		}
		fs := v.Header()
		resp.MultiValueHeaders = withMulti(resp.MultiValueHeaders, resp.Headers, fs)
		resp.Headers = withoutOurs(resp.Headers, fs)
		return resp, nil
	}
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
	mustWrap("ALB", e, h == nil)
	return func(ctx context.Context, req events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
		multi := req.MultiValueHeaders != nil ||
			req.Headers == nil && req.MultiValueQueryStringParameters != nil
		in := edgelimit.Input{
			Method: req.HTTPMethod,
			Path:   req.Path,
		}
		in.Header = headersOf(req.Headers, req.MultiValueHeaders)
		in.SourceIP = rightmost(in.Header.Get("X-Forwarded-For"))
		v := e.Decide(ctx, &in)
		if !v.Allowed {
			code := status(v)
			resp := events.ALBTargetGroupResponse{
				StatusCode:        code,
				StatusDescription: statusDescription(code),
				Body:              body(v),
			}
			if multi {
				resp.MultiValueHeaders = multiOf(v.Header())
			} else {
				resp.Headers = singleOf(v.Header())
			}
			return resp, nil
		}
		resp, err := h(edgelimit.NewContext(ctx, v), req)
		if err != nil {
			return resp, err
		}
		fs := v.Header()
		if multi {
			resp.MultiValueHeaders = withMulti(resp.MultiValueHeaders, resp.Headers, fs)
			resp.Headers = withoutOurs(resp.Headers, fs)
		} else {
			resp.Headers = withSingle(resp.Headers, resp.MultiValueHeaders, fs)
		}
		return resp, nil
	}
}
