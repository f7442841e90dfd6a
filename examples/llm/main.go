// Command llm is an LLM-style endpoint behind two token counters: input
// tokens and output tokens a minute per API key, each reserved before the
// handler runs and settled after it with what the request used (see
// docs/shaping.md, "Several counters per request").
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"log"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/dynamodb"
	"github.com/edgelimit/edgelimit/setup/dynamodb/durable"
	"github.com/edgelimit/edgelimit/setup/secretsmanager"
)

//go:embed policies.yaml
var policies []byte

// maxTokens bounds what one request may ask to generate.
const maxTokens = 1000

// request is the body of POST /generate.
type request struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"`
}

// tokens counts a text's tokens: its words, for the example.
func tokens(s string) int64 { return int64(len(strings.Fields(s))) }

// reserve sets the request's reservations before the middleware decides:
// its prompt's tokens (known before), and the output it may generate
// (max_tokens, bounded; without one the policy's reserve). A body that does
// not parse reserves nothing of its own: the handler answers it 400, and
// its reservations are given back.
func reserve(ctx context.Context, body string) context.Context {
	var r request
	if json.Unmarshal([]byte(body), &r) != nil {
		return ctx
	}
	ctx = edgelimit.WithReservation(ctx, "input-tokens", tokens(r.Prompt))
	return edgelimit.WithReservation(ctx, "output-tokens", min(r.MaxTokens, maxTokens))
}

// generate is the endpoint: it "generates" an answer, whose length it
// knows only at the end, and reports both counts.
func generate(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	v, _ := edgelimit.FromContext(ctx)
	var r request
	if err := json.Unmarshal([]byte(req.Body), &r); err != nil || tokens(r.Prompt) == 0 {
		v.ReportCost(0) // nothing was used: every reservation comes back
		return events.APIGatewayV2HTTPResponse{StatusCode: 400, Body: "a JSON body with a prompt is required\n"}, nil
	}
	limit := r.MaxTokens
	if limit <= 0 || limit > maxTokens {
		limit = 256
	}
	// The answer: the prompt's words, twice, up to the limit.
	in := strings.Fields(r.Prompt)
	var out []string
	for i := int64(0); i < min(2*int64(len(in)), limit); i++ {
		out = append(out, in[i%int64(len(in))])
	}
	v.ReportCostFor("input-tokens", int64(len(in)))
	v.ReportCostFor("output-tokens", int64(len(out)))
	return events.APIGatewayV2HTTPResponse{StatusCode: 200,
		Headers: map[string]string{"X-Tokens": strconv.Itoa(len(in)) + " in, " + strconv.Itoa(len(out)) + " out"},
		Body:    strings.Join(out, " ") + "\n"}, nil
}

// handler is the function: reservations, then the middleware, then generate.
func handler(e *edgelimit.Engine) middleware.HTTPAPIHandler {
	guarded := middleware.HTTPAPI(e, generate)
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return guarded(reserve(ctx, req.Body), req)
	}
}

func main() {
	env, err := setup.FromEnv(context.Background(), setup.EnvConfig{Policies: policies,
		Backends: []setup.Backend{durable.Backend(dynamodb.Config{})}, Secrets: secretsmanager.Source()})
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(handler(env.Engine))
}
