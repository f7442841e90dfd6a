package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/middleware"
)

// reusePolicies limits each API key to 3 a minute on /r/*, so that a
// client's responses count down 2, 1, 0 and then deny: every response
// carries data of its own client only.
const reusePolicies = `
version: 1
policies:
  - name: per-key
    routes: ["GET /r/*"]
    key: header:X-Api-Key
    strategy: durable
    limit: 3
    window: 1m
`

// TestVerdictReuse pins what the reuse of Verdicts guarantees, with 64
// goroutines of distinct clients through middleware.Handler (run it with
// -race): a response's headers are its own request's and stay so after
// the middleware returned and other requests reused the Verdict (the
// recorders are read only at the end); a handler that looks its Verdict
// up may keep it, and it still describes its own request after every
// other request ran; a context the handler kept without looking the
// Verdict up no longer carries one once the response is done.
func TestVerdictReuse(t *testing.T) {
	e, _ := buildEngine(t, reusePolicies, nil)
	type kept struct {
		client string
		n      int
		v      *edgelimit.Verdict
		ctx    context.Context
	}
	var mu sync.Mutex
	var keptVerdicts, keptContexts []kept
	h := middleware.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := r.Header.Get("X-Api-Key")
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		mu.Lock()
		defer mu.Unlock()
		if n%2 == 0 { // looks the Verdict up and keeps it
			v, ok := edgelimit.FromContext(r.Context())
			if !ok {
				t.Errorf("%s #%d: no Verdict in the handler's context", client, n)
				return
			}
			keptVerdicts = append(keptVerdicts, kept{client: client, n: n, v: v})
		} else { // keeps the context only
			keptContexts = append(keptContexts, kept{client: client, n: n, ctx: r.Context()})
		}
		w.WriteHeader(200)
	}))
	const clients, perClient = 64, 5
	recs := make([][]*httptest.ResponseRecorder, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range perClient {
				r := httptest.NewRequest("GET", fmt.Sprintf("/r/x?n=%d", n), nil)
				r.Header.Set("X-Api-Key", fmt.Sprintf("client-%02d", c))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				recs[c] = append(recs[c], rec)
			}
		}()
	}
	wg.Wait()
	for c, rs := range recs {
		for n, rec := range rs {
			want := max(3-n-1, 0)
			wantStatus := 200
			if n >= 3 {
				wantStatus = 429
			}
			if rec.Code != wantStatus {
				t.Errorf("client %d #%d: status %d, want %d", c, n, rec.Code, wantStatus)
			}
			if got := rec.Header().Get("X-Ratelimit-Remaining"); got != strconv.Itoa(want) {
				t.Errorf("client %d #%d: X-RateLimit-Remaining %q, want %d (another request's?)", c, n, got, want)
			}
			if got, wantRL := rec.Header().Get("Ratelimit"), `"per-key";r=`+strconv.Itoa(want)+";t="; len(got) < len(wantRL) || got[:len(wantRL)] != wantRL {
				t.Errorf("client %d #%d: RateLimit %q, want %s…", c, n, got, wantRL)
			}
		}
	}
	for _, k := range keptVerdicts {
		want := int64(3 - k.n - 1)
		if !k.v.Allowed || len(k.v.Decisions) != 1 || k.v.Decisions[0].Remaining != want || k.v.Route != "GET /r/*" {
			t.Errorf("%s #%d: the kept Verdict reads %+v, want its own request's (remaining %d)", k.client, k.n, k.v, want)
		}
		if got := k.v.Header(); len(got) == 0 {
			t.Errorf("%s #%d: the kept Verdict has no header fields", k.client, k.n)
		}
	}
	for _, k := range keptContexts {
		if v, ok := edgelimit.FromContext(k.ctx); ok {
			t.Errorf("%s #%d: a context kept past the response still carries a Verdict: %+v", k.client, k.n, v)
		}
	}
	if len(keptVerdicts) == 0 || len(keptContexts) == 0 {
		t.Fatalf("kept %d verdicts and %d contexts; the handler ran too seldom", len(keptVerdicts), len(keptContexts))
	}
}

// TestLambdaResponsesOutliveTheVerdict: the header values and the body of
// a Lambda response stay its own after the adapter reused the Verdict for
// other requests (64 goroutines, -race).
func TestLambdaResponsesOutliveTheVerdict(t *testing.T) {
	e, _ := buildEngine(t, reusePolicies, nil)
	h := middleware.HTTPAPI(e, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: jsonHeaders}, nil
	})
	const clients, perClient = 64, 5
	resps := make([][]events.APIGatewayV2HTTPResponse, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perClient {
				ev := events.APIGatewayV2HTTPRequest{RawPath: "/r/x", Headers: map[string]string{"x-api-key": fmt.Sprintf("client-%02d", c)}}
				ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.SourceIP = "GET", "192.0.2.1"
				resp, err := h(context.Background(), ev)
				if err != nil {
					t.Error(err)
				}
				resps[c] = append(resps[c], resp)
			}
		}()
	}
	wg.Wait()
	for c, rs := range resps {
		for n, resp := range rs {
			want := strconv.Itoa(max(3-n-1, 0))
			if got := resp.Headers["X-RateLimit-Remaining"]; got != want {
				t.Errorf("client %d #%d: X-RateLimit-Remaining %q, want %s", c, n, got, want)
			}
			if n >= 3 && (resp.StatusCode != 429 || !json200ish(resp.Body)) {
				t.Errorf("client %d #%d: %d %q, want a 429 with its problem body", c, n, resp.StatusCode, resp.Body)
			}
		}
	}
	if len(jsonHeaders) != 1 {
		t.Errorf("the handler's shared header map was written to: %v", jsonHeaders)
	}
}

// json200ish reports a problem body naming the policy.
func json200ish(body string) bool {
	return strings.HasPrefix(body, "{") && strings.Contains(body, `"violated-policies":["per-key"]`)
}
