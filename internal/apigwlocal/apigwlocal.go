// Package apigwlocal emulates API Gateway HTTP API (payload format 2.0) in
// front of a Lambda handler on a plain net/http server, so that what
// `edgelimit serve` runs locally is the same handler chain that runs on
// Lambda.
package apigwlocal

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// Handler is a Lambda handler for HTTP API events.
type Handler func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// MaxBody is Lambda's synchronous payload limit; larger bodies get 413, as
// API Gateway answers.
const MaxBody = 6 << 20

// Config configures a Server.
type Config struct {
	// Handler answers every request. Required.
	Handler Handler
	// Logger receives handler errors; default slog.Default().
	Logger *slog.Logger
	// Now stamps requestContext.time; default time.Now.
	Now func() time.Time
	// RouteKey names the route the gateway matched for a request, as
	// routeKey ("POST /contact"); default "$default" for every request.
	RouteKey func(method, rawPath string) string
}

// Server is an http.Handler that turns requests into API Gateway v2 events.
type Server struct {
	h     Handler
	log   *slog.Logger
	now   func() time.Time
	route func(method, rawPath string) string
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, errors.New("apigwlocal: Config.Handler is required")
	}
	s := &Server{h: cfg.Handler, log: cfg.Logger, now: cfg.Now, route: cfg.RouteKey}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// ServeHTTP translates r into an event, calls the handler and writes its
// response. A handler error is a 500 {"message":"Internal Server Error"},
// as API Gateway answers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ev, err := s.Event(r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeMessage(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
			return
		}
		writeMessage(w, http.StatusBadRequest, "Bad Request")
		return
	}
	resp, err := s.h(r.Context(), ev)
	if err != nil {
		s.log.Error("apigwlocal: handler failed", "error", err, "requestId", ev.RequestContext.RequestID)
		writeMessage(w, http.StatusInternalServerError, "Internal Server Error")
		return
	}
	WriteResponse(w, resp)
}

// Event builds the HTTP API v2 event API Gateway would send for r.
func (s *Server) Event(r *http.Request) (events.APIGatewayV2HTTPRequest, error) {
	now := s.now()
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBody))
	if err != nil {
		return events.APIGatewayV2HTTPRequest{}, err
	}
	headers := make(map[string]string, len(r.Header)+1)
	var cookies []string
	for name, vs := range r.Header {
		lower := strings.ToLower(name)
		if lower == "cookie" {
			for _, v := range vs {
				for _, c := range strings.Split(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						cookies = append(cookies, c)
					}
				}
			}
			continue
		}
		headers[lower] = strings.Join(vs, ",")
	}
	headers["host"] = r.Host
	sourceIP, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		sourceIP = r.RemoteAddr
	}
	rawPath := r.URL.EscapedPath()
	var query map[string]string
	if q := r.URL.Query(); len(q) > 0 {
		query = make(map[string]string, len(q))
		for k, vs := range q {
			query[k] = strings.Join(vs, ",")
		}
	}
	routeKey := "$default"
	if s.route != nil {
		routeKey = s.route(r.Method, rawPath)
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              routeKey,
		RawPath:               rawPath,
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     routeKey,
			AccountID:    "000000000000",
			Stage:        "$default",
			RequestID:    requestID(),
			APIID:        "local",
			DomainName:   r.Host,
			DomainPrefix: strings.SplitN(r.Host, ".", 2)[0],
			Time:         now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      rawPath,
				Protocol:  r.Proto,
				SourceIP:  sourceIP,
				UserAgent: r.UserAgent(),
			},
		},
	}
	if len(body) > 0 {
		if utf8.Valid(body) && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/octet-stream") {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev, nil
}

// WriteResponse writes a Lambda HTTP API response to w.
func WriteResponse(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) {
	h := w.Header()
	for k, v := range resp.Headers {
		h.Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		dec, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			writeMessage(w, http.StatusBadGateway, "Internal Server Error")
			return
		}
		body = dec
	}
	if h.Get("Content-Type") == "" && len(body) > 0 {
		h.Set("Content-Type", "application/json")
	}
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeMessage(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

func requestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
