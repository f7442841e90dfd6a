package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/edgelimit/edgelimit/functions/handlers"
	"github.com/edgelimit/edgelimit/limitertest"
	"github.com/edgelimit/edgelimit/pow"
)

// Windows in these tests are 1000 days, so that no window boundary (and no
// refill) can fall inside a run and every count is exact.
const longWindow = "1000d"

const longWindowSeconds = 1000 * 24 * 3600

func randomID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// wantStatus fails unless resp has status code.
func wantStatus(t *testing.T, what string, resp events.APIGatewayV2HTTPResponse, code int) {
	t.Helper()
	if resp.StatusCode != code {
		t.Fatalf("%s: status %d, want %d; headers %v; body %s", what, resp.StatusCode, code, resp.Headers, resp.Body)
	}
}

// wantProblem checks a problem+json answer and returns it.
func wantProblem(t *testing.T, what string, resp events.APIGatewayV2HTTPResponse, code int, typ string) limitertest.Problem {
	t.Helper()
	wantStatus(t, what, resp, code)
	if ct := header(resp, "Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want %q", what, ct, "application/problem+json")
	}
	var p limitertest.Problem
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
		t.Fatalf("%s: body %q is not a problem: %v", what, resp.Body, err)
	}
	if p.Status != code || p.Type != typ {
		t.Errorf("%s: problem status %d type %q, want %d %q", what, p.Status, p.Type, code, typ)
	}
	if code == 429 || code == 503 {
		ra, err := strconv.Atoi(header(resp, "Retry-After"))
		if err != nil || ra < 1 {
			t.Errorf("%s: Retry-After %q, want whole seconds >= 1", what, header(resp, "Retry-After"))
		}
	}
	return p
}

// wantEMF checks the last EMF line the function wrote for policy.
func wantEMF(t *testing.T, e *emulator, policy, route string, want map[string]float64) {
	t.Helper()
	m, err := e.lastEMF(policy)
	if err != nil {
		t.Fatalf("%v; stdout:\n%s", err, e.stdout)
	}
	if m["Route"] != route || m["Function"] != e.name {
		t.Errorf("EMF line %v: want Route %q and Function %q", m, route, e.name)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("EMF %s = %v, want %v (line %v)", k, m[k], v, m)
		}
	}
}

// wantLog finds a log line with message whose requestId is id, waiting
// for the emulator to pass it on (up to invokeTimeout).
func wantLog(t *testing.T, e *emulator, message, id string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(invokeTimeout); ; time.Sleep(10 * time.Millisecond) {
		for _, l := range e.logLines() {
			if l["message"] == message && l["requestId"] == id {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line %q with requestId %q; output:\n%s", message, id, e.output())
			return nil
		}
	}
}

// testBudget is the store budget of the functions whose tests count on a
// working store: dynalite is shared with the other packages' concurrency
// tests in `make test`, and a call past the default 100 ms would turn an
// expected 200 into the policy's 503 (seen in CI). The store-down tests
// keep the default.
const testBudget = "5s"

func TestPaidFunction(t *testing.T) {
	endpoint, table := dynalite(t)
	e := startEmulator(t, "paid", map[string]string{
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_OVERRIDES": "paid-daily.limit=3,paid-daily.window=" + longWindow + ",paid-daily.store_timeout=" + testBudget +
			",paid-burst.limit=5,paid-burst.burst=5,paid-burst.window=" + longWindow + ",paid-burst.store_timeout=" + testBudget,
	})
	key := "key-" + randomID(t)
	get := func(apiKey, path string) events.APIGatewayV2HTTPResponse {
		h := map[string]string{}
		if apiKey != "" {
			h["X-Api-Key"] = apiKey
		}
		resp, _ := e.invoke(t, sampleEvent(t, "GET", path, "203.0.113.7", h, ""))
		return resp
	}
	wantPolicy := fmt.Sprintf(`"paid-daily";q=3;w=%d, "paid-burst";q=5;w=%d`, longWindowSeconds, longWindowSeconds)
	for i := 1; i <= 3; i++ {
		resp := get(key, "/paid/report")
		wantStatus(t, fmt.Sprintf("request %d", i), resp, 200)
		var body handlers.PaidResponse
		if err := json.Unmarshal([]byte(resp.Body), &body); err != nil || body.Resource != "report" || len(body.Points) != 12 {
			t.Errorf("request %d: body %s (%v), want the report", i, resp.Body, err)
		}
		if got := header(resp, "RateLimit-Policy"); got != wantPolicy {
			t.Errorf("request %d: RateLimit-Policy %q, want %q", i, got, wantPolicy)
		}
		rl := header(resp, "RateLimit")
		if !strings.Contains(rl, fmt.Sprintf(`"paid-daily";r=%d;`, 3-i)) || !strings.Contains(rl, fmt.Sprintf(`"paid-burst";r=%d;`, 5-i)) {
			t.Errorf("request %d: RateLimit %q, want paid-daily r=%d and paid-burst r=%d", i, rl, 3-i, 5-i)
		}
		if got := header(resp, "X-RateLimit-Remaining"); got != strconv.Itoa(3-i) {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %d", i, got, 3-i)
		}
	}
	denied := get(key, "/paid/report")
	p := wantProblem(t, "request 4", denied, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if !slices.Equal(p.ViolatedPolicies, []string{"paid-daily"}) {
		t.Errorf("request 4: violated-policies %v, want [paid-daily]", p.ViolatedPolicies)
	}
	if !strings.Contains(header(denied, "RateLimit"), `"paid-daily";r=0;`) {
		t.Errorf("request 4: RateLimit %q, want paid-daily r=0", header(denied, "RateLimit"))
	}
	wantEMF(t, e, "paid-daily", "GET /paid/*", map[string]float64{"Allowed": 0, "Denied": 1, "Degraded": 0})

	// Another key has its own quota, and a bad resource is the handler's 400.
	other := "key-" + randomID(t)
	wantStatus(t, "another key", get(other, "/paid/summary"), 200)
	wantProblem(t, "bad resource", get(other, "/paid/NOT_ok!"), 400, "about:blank")

	// No API key: the middleware answers 400 and logs why, with the request id.
	resp, id := e.invoke(t, sampleEvent(t, "GET", "/paid/report", "203.0.113.7", nil, ""))
	wantProblem(t, "no API key", resp, 400, "about:blank")
	l := wantLog(t, e, "edgelimit: request without a usable key", id)
	if l["policy"] == nil || l["function"] != "paid" || l["level"] != "INFO" {
		t.Errorf("log line %v: want policy, function paid and level INFO", l)
	}
	if strings.Contains(e.output(), key) {
		t.Errorf("the raw API key appears in the function's output")
	}
}

func TestPaidFunctionFailsClosed(t *testing.T) {
	e := startEmulator(t, "paid", map[string]string{
		"EDGELIMIT_TABLE":             "edgelimit",
		"EDGELIMIT_DYNAMODB_ENDPOINT": closedEndpoint(t),
	})
	resp, id := e.invoke(t, sampleEvent(t, "GET", "/paid/report", "203.0.113.7", map[string]string{"X-Api-Key": "k-1"}, ""))
	wantProblem(t, "store down", resp, 503, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity")
	wantEMF(t, e, "paid-daily", "GET /paid/*", map[string]float64{"Allowed": 0, "Denied": 1, "Degraded": 1})
	l := wantLog(t, e, "edgelimit: store failed", id)
	if l["level"] != "WARN" || l["on_store_error"] != "deny" {
		t.Errorf("log line %v: want level WARN, on_store_error deny", l)
	}
}

func contactEvent(t *testing.T, ip, contentType, body string) events.APIGatewayV2HTTPRequest {
	return sampleEvent(t, "POST", "/contact", ip, map[string]string{"Content-Type": contentType}, body)
}

const contactJSON = `{"name":"Ada","email":"ada@example.com","message":"Hello from the e2e test."}`

func TestContactFunction(t *testing.T) {
	endpoint, table := dynalite(t)
	e := startEmulator(t, "contact", map[string]string{
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_OVERRIDES":         "contact.limit=3,contact.window=" + longWindow + ",contact.store_timeout=" + testBudget,
	})
	ip := "198.51.100.23"
	for i := 1; i <= 3; i++ {
		ev := contactEvent(t, ip, "application/json", contactJSON)
		if i == 2 {
			ev = contactEvent(t, ip, "application/x-www-form-urlencoded", "name=Ada&email=ada%40example.com&message=Hi")
		}
		resp, _ := e.invoke(t, ev)
		wantStatus(t, fmt.Sprintf("message %d", i), resp, 202)
		if got := header(resp, "RateLimit"); !strings.HasPrefix(got, fmt.Sprintf(`"contact";r=%d;`, 3-i)) {
			t.Errorf("message %d: RateLimit %q, want contact r=%d", i, got, 3-i)
		}
	}
	resp, _ := e.invoke(t, contactEvent(t, ip, "application/json", contactJSON))
	p := wantProblem(t, "message 4", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if !slices.Equal(p.ViolatedPolicies, []string{"contact"}) {
		t.Errorf("violated-policies %v, want [contact]", p.ViolatedPolicies)
	}
	wantEMF(t, e, "contact", "POST /contact", map[string]float64{"Denied": 1})

	// Another address is not limited by the first; a bad message is a 400.
	resp, _ = e.invoke(t, contactEvent(t, "198.51.100.24", "application/json", `{"name":"Ada","email":"not an address","message":"x"}`))
	wantProblem(t, "bad email", resp, 400, "about:blank")
}

func TestContactFunctionFailsOpen(t *testing.T) {
	e := startEmulator(t, "contact", map[string]string{
		"EDGELIMIT_TABLE":             "edgelimit",
		"EDGELIMIT_DYNAMODB_ENDPOINT": closedEndpoint(t),
	})
	resp, id := e.invoke(t, contactEvent(t, "198.51.100.23", "application/json", contactJSON))
	wantStatus(t, "store down", resp, 202)
	wantEMF(t, e, "contact", "POST /contact", map[string]float64{"Allowed": 1, "Denied": 0, "Degraded": 1})
	wantLog(t, e, "edgelimit: store failed", id)
}

func TestSearchFunction(t *testing.T) {
	endpoint, table := dynalite(t)
	e := startEmulator(t, "search", map[string]string{
		"EDGELIMIT_TABLE":             table,
		"EDGELIMIT_DYNAMODB_ENDPOINT": endpoint,
		"EDGELIMIT_OVERRIDES":         "search.limit=3,search.burst=3,search.window=" + longWindow + ",search.store_timeout=" + testBudget,
	})
	ip := "192.0.2.44"
	for i := 1; i <= 3; i++ {
		resp, _ := e.invoke(t, sampleEvent(t, "GET", "/search?q=walnut+lamp&limit=5", ip, nil, ""))
		wantStatus(t, fmt.Sprintf("search %d", i), resp, 200)
		var body handlers.SearchResponse
		if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
			t.Fatalf("search %d: body %q: %v", i, resp.Body, err)
		}
		if body.Scanned != handlers.DefaultSearchRecords || body.Matches == 0 || len(body.Results) != 5 {
			t.Errorf("search %d: scanned %d, matches %d, %d results; want %d scanned, some matches, 5 results",
				i, body.Scanned, body.Matches, len(body.Results), handlers.DefaultSearchRecords)
		}
		if got := header(resp, "RateLimit-Policy"); got != fmt.Sprintf(`"search";q=3;w=%d`, longWindowSeconds) {
			t.Errorf("search %d: RateLimit-Policy %q", i, got)
		}
	}
	resp, _ := e.invoke(t, sampleEvent(t, "GET", "/search?q=walnut+lamp", ip, nil, ""))
	p := wantProblem(t, "search 4", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if !slices.Equal(p.ViolatedPolicies, []string{"search"}) {
		t.Errorf("violated-policies %v, want [search]", p.ViolatedPolicies)
	}
	wantEMF(t, e, "search", "GET /search", map[string]float64{"Denied": 1})
	resp, _ = e.invoke(t, sampleEvent(t, "GET", "/search?q=x", "192.0.2.45", nil, ""))
	wantProblem(t, "one-character query", resp, 400, "about:blank")
}

func ttsEvent(t *testing.T, ip string, h map[string]string) events.APIGatewayV2HTTPRequest {
	if h == nil {
		h = map[string]string{}
	}
	h["Content-Type"] = "application/json"
	return sampleEvent(t, "POST", "/tts", ip, h, `{"text":"hello edge"}`)
}

// TestTTSFunction walks the storage-free flow a client goes through: no
// token, a 429 with a proof-of-work challenge, a proof that buys a signed
// window, and the token carried from response to request until the window's
// limit is spent.
func TestTTSFunction(t *testing.T) {
	const limit = 3
	ring := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{42}, 32))
	e := startEmulator(t, "tts", map[string]string{
		"EDGELIMIT_SECRETS":   "k1:" + ring,
		"EDGELIMIT_OVERRIDES": fmt.Sprintf("tts.limit=%d,tts.window=%s", limit, longWindow),
	})
	ip := "203.0.113.99"
	resp, _ := e.invoke(t, ttsEvent(t, ip, nil))
	wantProblem(t, "no token", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	challenge := header(resp, "Edgelimit-Challenge")
	var body struct {
		Challenge *pow.Challenge `json:"challenge"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &body); err != nil || challenge == "" || body.Challenge == nil || body.Challenge.Value != challenge || body.Challenge.Bits < 1 {
		t.Fatalf("no token: challenge header %q, body %s; want the same challenge in both", challenge, resp.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proof, err := pow.Solve(ctx, challenge)
	if err != nil {
		t.Fatalf("pow.Solve: %v", err)
	}
	allowed, token := 0, ""
	h := map[string]string{"Edgelimit-Proof": proof}
	for i := 0; i < limit+1; i++ {
		resp, _ = e.invoke(t, ttsEvent(t, ip, h))
		if resp.StatusCode != 200 {
			break
		}
		allowed++
		if ct := header(resp, "Content-Type"); ct != "audio/wav" || !resp.IsBase64Encoded {
			t.Errorf("response %d: Content-Type %q base64 %v, want audio/wav, base64", i+1, ct, resp.IsBase64Encoded)
		}
		if wav, err := base64.StdEncoding.DecodeString(resp.Body); err != nil || !bytes.HasPrefix(wav, []byte("RIFF")) {
			t.Errorf("response %d: body is not a base64 WAV file (%v)", i+1, err)
		}
		if tok := header(resp, "Edgelimit-Token"); tok != "" {
			token = tok
		}
		if token == "" {
			t.Fatalf("response %d: no Edgelimit-Token", i+1)
		}
		h = map[string]string{"Edgelimit-Token": token}
	}
	if allowed != limit {
		t.Fatalf("one proof bought %d requests, want exactly %d; last response %d %s", allowed, limit, resp.StatusCode, resp.Body)
	}
	wantProblem(t, "window spent", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	if header(resp, "Edgelimit-Challenge") == "" {
		t.Errorf("window spent: no new challenge")
	}
	wantEMF(t, e, "tts", "POST /tts", map[string]float64{"Allowed": 0, "Denied": 1, "Degraded": 0})

	// The token is bound to its client: another address gets a challenge.
	resp, _ = e.invoke(t, ttsEvent(t, "203.0.113.100", map[string]string{"Edgelimit-Token": token}))
	wantProblem(t, "token of another client", resp, 429, "https://iana.org/assignments/http-problem-types#quota-exceeded")
}
