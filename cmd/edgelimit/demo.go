package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
)

// demoHandler answers every route that has no example function: a JSON echo
// of the request, the route that matched and what each policy decided.
func demoHandler(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	type policy struct {
		Name      string `json:"policy"`
		Limit     int64  `json:"limit"`
		Remaining int64  `json:"remaining"`
		ResetSecs int64  `json:"reset_seconds"`
		Degraded  bool   `json:"degraded,omitempty"`
	}
	out := struct {
		Method    string   `json:"method"`
		Path      string   `json:"path"`
		SourceIP  string   `json:"source_ip"`
		RequestID string   `json:"request_id"`
		Route     string   `json:"route,omitempty"`
		Policies  []policy `json:"policies,omitempty"`
	}{
		Method:    ev.RequestContext.HTTP.Method,
		Path:      ev.RawPath,
		SourceIP:  ev.RequestContext.HTTP.SourceIP,
		RequestID: ev.RequestContext.RequestID,
	}
	if v, ok := edgelimit.FromContext(ctx); ok {
		out.Route = v.Route
		for _, d := range v.Decisions {
			if d.Policy == "" {
				continue
			}
			out.Policies = append(out.Policies, policy{d.Policy, d.Limit, d.Remaining, int64((max(d.Reset, 0) + time.Second - 1) / time.Second), d.Degraded})
		}
	}
	body, err := json.Marshal(out)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return events.APIGatewayV2HTTPResponse{
		StatusCode: 200,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       string(body),
	}, nil
}
